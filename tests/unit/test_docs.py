"""The documentation: the README stays a front door, the site builds strictly (a broken link or a
page left out of the navigation fails), the configuration reference is the settings models', and
every file or directory the pages name exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
#: Where the files the pages name live: a name starting with one of these is a path.
_TOP = ("chronos/", "proxy/", "tests/", "scripts/", "docker/", "config/", "docs/", ".ci/")
#: A path in backquotes or a link: ``chronos/x.py``, ``tests/y.py::test_z``, ``docker/``.
_NAMED = re.compile(r"(?:`|\]\()((?:" + "|".join(map(re.escape, _TOP)) + r")[\w./-]*)")
#: A module named by its package alone, as the pages often do: ``group/placement.py``.
_PACKAGES = sorted(p.name for p in (ROOT / "chronos").iterdir() if (p / "__init__.py").exists())
_MODULE = re.compile(r"`((?:" + "|".join(_PACKAGES) + r")/[\w/]+\.py)")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_the_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move the detail into docs/"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    assert (tmp_path / "reference" / "configuration" / "index.html").is_file()


def test_the_configuration_reference_is_the_settings_models() -> None:
    generated = load_script("export_config_reference").reference()
    committed = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    assert committed == generated, "stale: run scripts/export_config_reference.py"


def test_every_path_the_pages_name_exists() -> None:
    """Mutant caught: a page naming ``chronos/group/record.py`` (moved to
    ``chronos/schedule/progress_record.py``)."""
    missing = []
    for page in _pages():
        text = page.read_text()
        for found in _NAMED.finditer(text):
            named = found.group(1).rstrip(".,:")
            if not (ROOT / named).exists():
                missing.append(f"{page.relative_to(ROOT)}: {named}")
        for found in _MODULE.finditer(text):
            if not (ROOT / "chronos" / found.group(1)).exists():
                missing.append(f"{page.relative_to(ROOT)}: chronos/{found.group(1)}")
    assert not missing, "\n".join(missing)
