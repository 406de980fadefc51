"""Another revision installed in its own checkout and venv runs its own code, not this tree's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from chronos.bench.revision import RevisionError, install, this_tree

_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "chronos-delay"
version = "0.0.1"

[project.scripts]
chronos = "chronos_stub:main"

[tool.setuptools]
py-modules = ["chronos_stub"]
"""


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _commit(repo: Path, says: str) -> str:
    (repo / "chronos_stub.py").write_text(f"def main() -> None:\n    print({says!r})\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", says)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "pyproject.toml").write_text(_PYPROJECT)
    return repo


def test_an_installed_revision_runs_its_own_code_and_is_reused(repo: Path, tmp_path: Path) -> None:
    first = _commit(repo, "release one")
    _commit(repo, "release two")
    _git(repo, "tag", "v1", first)
    lines: list[str] = []
    revision = install("v1", repo, lines.append, cache=tmp_path / "cache")
    assert revision.sha == first
    assert revision.label == f"v1 ({first[:7]})"
    said = subprocess.run(list(revision.command), capture_output=True, text=True, check=True)
    assert said.stdout.strip() == "release one"
    assert len(lines) == 1 and "installing v1" in lines[0]
    again = install(first, repo, lines.append, cache=tmp_path / "cache")
    assert again.command == revision.command
    assert len(lines) == 1  # nothing installed the second time


def test_an_unknown_ref_says_so(repo: Path, tmp_path: Path) -> None:
    _commit(repo, "release one")
    with pytest.raises(RevisionError, match="'nope' is not a commit"):
        install("nope", repo, print, cache=tmp_path / "cache")


def test_this_tree_names_its_head_and_whether_it_has_changes(repo: Path) -> None:
    head = _commit(repo, "release one")
    assert this_tree(repo).sha == head
    assert this_tree(repo).ref == "working tree"
    (repo / "chronos_stub.py").write_text("changed = True\n")
    assert "uncommitted" in this_tree(repo).ref
