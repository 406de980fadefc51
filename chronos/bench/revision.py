"""Another revision of chronos installed beside this one: its own checkout and its own venv.

Why its own venv and not its source on this interpreter's path: a revision is compared as a
user would run it (its own entry point, its own dependency pins), and nothing of this tree
leaks into it. The dependencies are held to the versions this environment has (a constraints
file from ``pip freeze``), so librdkafka and RocksDB are the same on both sides and the
comparison measures chronos, not a library upgrade; a revision that cannot take those pins is
installed with its own resolution and says so (``pinned``).

Layout under the cache (``~/.cache/chronos/revisions`` unless ``CHRONOS_REVISIONS_DIR``),
one folder per commit and set of pins (``<pins>``: a hash of the constraints, so an upgraded
environment installs the revision again rather than measure it on older libraries)::

    <sha>-<pins>/src     a clone of the repository checked out at <sha>
    <sha>-<pins>/venv    its virtual environment (``venv/bin/chronos``)
    <sha>-<pins>/ready   written last: the install finished (an interrupted one starts again)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


class RevisionError(RuntimeError):
    """A revision could not be resolved or installed; the message says which step failed."""


@dataclass(frozen=True)
class Revision:
    """A chronos revision ready to run.

    Parameters:
        ref: what the user named (a tag, a branch, a commit).
        sha: the commit it resolved to.
        command: how to start its ``chronos`` command (the subcommand follows).
        pinned: its dependencies are this environment's versions.
    """

    ref: str
    sha: str
    command: tuple[str, ...]
    pinned: bool = True

    @property
    def label(self) -> str:
        """A short name for tables: the ref, and the commit when the ref is not one."""
        short = self.sha[:7]
        return short if self.sha.startswith(self.ref) else f"{self.ref} ({short})"


def this_tree(repo: Path) -> Revision:
    """The chronos this interpreter runs (the working tree, with its uncommitted changes)."""
    sha = _git(repo, "rev-parse", "HEAD")
    dirty = bool(_git(repo, "status", "--porcelain", "--untracked-files=no"))
    return Revision(
        "working tree" + (" (uncommitted changes)" if dirty else ""),
        sha,
        (sys.executable, "-m", "chronos.cli.entry"),
    )


def cache_dir() -> Path:
    """Where installed revisions are kept between runs."""
    given = os.environ.get("CHRONOS_REVISIONS_DIR")
    return Path(given) if given else Path.home() / ".cache" / "chronos" / "revisions"


def install(
    ref: str, repo: Path, log: Callable[[str], None], cache: Path | None = None
) -> Revision:
    """Check ``ref`` of ``repo`` out into its own folder and install it into its own venv;
    reused when already installed (keyed by commit)."""
    try:
        sha = _git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}")
    except RevisionError as exc:
        raise RevisionError(f"{ref!r} is not a commit of {repo}: {exc}") from exc
    pins = _frozen()
    home = (cache or cache_dir()) / f"{sha}-{hashlib.sha256(pins.encode()).hexdigest()[:12]}"
    chronos = home / "venv" / "bin" / "chronos"
    ready = home / "ready"
    if ready.exists():
        pinned = json.loads(ready.read_text()).get("pinned", True)
        return Revision(ref, sha, (str(chronos),), pinned)
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    log(f"installing {ref} ({sha[:7]}) into {home}")
    _run(["git", "clone", "--quiet", "--no-checkout", str(repo), str(home / "src")], "clone")
    _run(["git", "-C", str(home / "src"), "checkout", "--quiet", sha], "checkout")
    _run([sys.executable, "-m", "venv", str(home / "venv")], "venv")
    pip = [str(home / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    constraints = home / "constraints.txt"
    constraints.write_text(pins)
    pinned = True
    try:
        _run([*pip, "-c", str(constraints), str(home / "src")], "pip install (pinned)")
    except RevisionError as exc:
        log(
            f"{ref}: its dependencies do not take this environment's versions ({exc}); "
            "installing with its own resolution"
        )
        pinned = False
        _run([*pip, str(home / "src")], "pip install")
    if not chronos.exists():
        raise RevisionError(f"{ref} ({sha[:7]}) installs no chronos command")
    ready.write_text(json.dumps({"ref": ref, "pinned": pinned}))
    return Revision(ref, sha, (str(chronos),), pinned)


def _frozen() -> str:
    """This environment's distributions as pins, chronos itself left out."""
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return "".join(
        f"{line}\n"
        for line in frozen.splitlines()
        if "==" in line and not line.lower().startswith("chronos")
    )


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RevisionError(done.stderr.strip() or f"git {' '.join(args)} failed")
    return done.stdout.strip()


def _run(command: list[str], step: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise RevisionError(f"{step} failed: {' / '.join(tail)}")
