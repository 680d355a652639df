"""The wheel and the sdist carry the license and the package, and none of the junk a
working tree collects.

The build runs on a copy of the source tree into which the test plants what running
the tests and the tools leaves behind (``.hypothesis/``, ``.venv/``, ``__pycache__``,
a SQLite file), so the check does not depend on what this checkout happens to hold.
It builds with ``python -m build --no-isolation`` (``build`` and ``hatchling`` are dev
dependencies), so it needs no network.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

#: What a working tree collects that no distribution may carry.
JUNK = (
    ".hypothesis/constants/0123abcd",
    ".venv/bin/python",
    "src/solid_objects/__pycache__/runtime.cpython-311.pyc",
    "tests/__pycache__/conftest.cpython-311.pyc",
    "app.db",
    ".pytest_cache/v/cache/lastfailed",
)


def forbidden(name: str) -> bool:
    parts = name.split("/")
    return any(
        part in {".hypothesis", ".venv", "__pycache__", ".pytest_cache", ".git"} for part in parts
    ) or name.endswith((".pyc", ".db"))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tree = tmp_path_factory.mktemp("tree") / "solid-objects"
    shutil.copytree(
        ROOT,
        tree,
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", ".hypothesis", "__pycache__", ".*_cache", "dist", "build", "results"
        ),
    )
    for junk in JUNK:
        (tree / junk).parent.mkdir(parents=True, exist_ok=True)
        (tree / junk).write_text("junk")
    out = tree.parent / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(tree)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return wheel, sdist


def test_the_wheel_carries_the_license_the_typing_marker_and_nothing_else(
    built: tuple[Path, Path],
) -> None:
    wheel, _ = built
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read("solid_objects-0.1.0.dist-info/METADATA").decode()
        license_text = archive.read("solid_objects-0.1.0.dist-info/licenses/LICENSE").decode()
    assert "MIT License" in license_text
    assert "Solid Objects for Python contributors" in license_text
    assert "License-Expression: MIT" in metadata
    assert "License-File: LICENSE" in metadata
    assert "solid_objects/py.typed" in names
    assert "solid_objects/cli/__init__.py" in names and "solid_objects/cli/common.py" in names
    assert not [n for n in names if forbidden(n)]
    assert {n.split("/")[0] for n in names} == {"solid_objects", "solid_objects-0.1.0.dist-info"}


def test_the_installed_wheel_runs_the_command_line(
    built: tuple[Path, Path], tmp_path: Path
) -> None:
    """The wheel's own files (not this checkout's) answer ``python -m solid_objects``."""
    wheel, _ = built
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path / "site")
    done = subprocess.run(
        [sys.executable, "-c", "import solid_objects; print(solid_objects.__file__)"],
        env={"PYTHONPATH": str(tmp_path / "site"), "PATH": ""},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == str(tmp_path / "site" / "solid_objects" / "__init__.py")
    done = subprocess.run(
        [sys.executable, "-m", "solid_objects", "--help"],
        env={"PYTHONPATH": str(tmp_path / "site"), "PATH": ""},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "worker" in done.stdout


def test_the_sdist_carries_the_license_and_sources_but_no_working_tree_junk(
    built: tuple[Path, Path],
) -> None:
    _, sdist = built
    with tarfile.open(sdist) as archive:
        names = [n.split("/", 1)[1] for n in archive.getnames() if "/" in n]
        license_member = archive.extractfile("solid_objects-0.1.0/LICENSE")
        assert license_member is not None
        assert "MIT License" in license_member.read().decode()
    needed = ("pyproject.toml", "README.md", "src/solid_objects/py.typed", "tests/conftest.py")
    assert [n for n in needed if n not in names] == []
    assert not [n for n in names if forbidden(n)]


def test_twine_check_passes_on_the_wheel_and_the_sdist(built: tuple[Path, Path]) -> None:
    """What PyPI would refuse or render badly (the README's markup, the metadata)."""
    wheel, sdist = built
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2, done.stdout


def test_the_metadata_names_the_project_for_an_index(built: tuple[Path, Path]) -> None:
    """URLs, authors, keywords and classifiers, and the README rendered as Markdown."""
    wheel, _ = built
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read("solid_objects-0.1.0.dist-info/METADATA").decode()
    headers = metadata.split("\n\n", 1)[0].splitlines()
    urls = {h.split(": ", 1)[1].split(", ", 1)[0] for h in headers if h.startswith("Project-URL")}
    assert {"Homepage", "Documentation", "Source", "Issues"} <= urls
    assert "Author: Solid Objects for Python contributors" in headers
    assert any(h.startswith("Keywords: ") and "actors" in h for h in headers)
    classifiers = {h.split(": ", 1)[1] for h in headers if h.startswith("Classifier: ")}
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert "Description-Content-Type: text/markdown" in headers
    extras = {h.split(": ", 1)[1] for h in headers if h.startswith("Provides-Extra: ")}
    assert {"web", "fastapi", "flask", "django", "testing", "postgres", "mysql"} <= extras
