"""Every module of the library is a room readable in one sitting: at most 600 lines.

A module that grows past it is split along a seam with a name (``store/leases.py``
out of the store, ``runtime/`` into its two faces, ``doctor/`` into its checks), not
trimmed to fit.
"""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "solid_objects"
MAX_LINES = 600


def lines_of(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_of_the_library_passes_600_lines() -> None:
    over = {
        str(path.relative_to(SRC)): lines_of(path)
        for path in sorted(SRC.rglob("*.py"))
        if lines_of(path) > MAX_LINES
    }
    assert over == {}, f"split along a named seam: {over}"


def test_the_count_reads_every_module() -> None:
    """The check itself: it finds the modules (a wrong root would pass vacuously)."""
    modules = list(SRC.rglob("*.py"))
    assert len(modules) > 100
    assert lines_of(SRC / "store" / "store.py") > 100
