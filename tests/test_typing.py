"""The typed call form passes mypy --strict and basedpyright (design 3, "typed references").

``tests/typing/check_refs.py`` holds the contract: ``assert_type`` lines that must
hold and wrong calls whose ignore comments must stay necessary. These tests run
the checkers on that folder in a subprocess, and run them on a deliberately
wrong file as a negative control, so the check cannot pass vacuously (a checker
that silently sees ``Any``, skips the file or ignores unused ignores would fail
the control).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
TYPING_DIR = ROOT / "tests" / "typing"
CONTRACT = TYPING_DIR / "check_refs.py"

# The control copies the contract's first line (its basedpyright settings), so it
# also proves that those settings make an unnecessary ignore an error.
CONTROL = """\
{header}
from typing import reveal_type

from solid_objects import Actor, Runtime


class Counter(Actor):
    value: int = 0

    def add(self, n: int = 1) -> int:
        self.value += n
        return self.value


def control(runtime: Runtime) -> None:
    ref = runtime.ref(Counter, "a")
    ref.call(Counter.add, n="x")
    fine: int = ref.call(Counter.add, n=1){ignores}
    print(fine)
    reveal_type(ref.call(Counter.add, n=1))
"""
WRONG_LINE = 17  # ref.call(Counter.add, n="x"), with no ignore comment
UNNEEDED_LINE = 18  # a correct line carrying ignore comments it does not need
REVEAL_LINE = 20
UNNEEDED_IGNORES = "  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]"


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=110)


def _mypy(*paths: Path) -> subprocess.CompletedProcess[str]:
    # Both checkers are in the [dev] extra: a missing one is a broken setup, not a skip.
    if importlib.util.find_spec("mypy") is None:
        pytest.fail("mypy is not installed (pip install -e '.[dev]')")
    return _run([sys.executable, "-m", "mypy", "--strict", *map(str, paths)])


def _basedpyright_command() -> list[str]:
    found = shutil.which("basedpyright", path=str(Path(sys.executable).parent)) or shutil.which(
        "basedpyright"
    )
    if found is None:
        pytest.fail("basedpyright is not installed (pip install -e '.[dev]')")
    return [found, "--pythonpath", sys.executable]


def _basedpyright_json(path: Path) -> dict[str, Any]:
    done = _run([*_basedpyright_command(), "--outputjson", str(path)])
    try:
        report: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"basedpyright printed no JSON report:\n{done.stdout}\n{done.stderr}")
    return report


@pytest.fixture
def control_file(tmp_path: Path) -> Path:
    header = CONTRACT.read_text(encoding="utf-8").splitlines()[0]
    assert header.startswith("# pyright:"), "check_refs.py must start with its pyright settings"
    path = tmp_path / "typing_control.py"
    path.write_text(CONTROL.format(header=header, ignores=UNNEEDED_IGNORES), encoding="utf-8")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert 'n="x")' in lines[WRONG_LINE - 1]
    assert "# type: ignore[assignment]" in lines[UNNEEDED_LINE - 1]
    assert "reveal_type(" in lines[REVEAL_LINE - 1]
    return path


def test_contract_passes_mypy_strict() -> None:
    done = _mypy(TYPING_DIR)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found in 1 source file" in done.stdout


def test_contract_passes_basedpyright() -> None:
    done = _run([*_basedpyright_command(), str(TYPING_DIR)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 errors, 0 warnings" in done.stdout, done.stdout


def test_mypy_rejects_a_wrong_call(control_file: Path) -> None:
    done = _mypy(control_file)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    name = re.escape(control_file.name)
    # The wrong argument type is an error...
    assert re.search(rf"{name}:{WRONG_LINE}: error: .*\[call-overload\]", out), out
    # ...an ignore comment that is not needed is one too (--warn-unused-ignores)...
    assert re.search(rf"{name}:{UNNEEDED_LINE}: error: Unused \"type: ignore\" comment", out), out
    # ...and the result type is really inferred, not Any.
    assert re.search(rf'{name}:{REVEAL_LINE}: note: Revealed type is "(builtins\.)?int"', out), out


def test_basedpyright_rejects_a_wrong_call(control_file: Path) -> None:
    report = _basedpyright_json(control_file)
    found = {
        (d["range"]["start"]["line"] + 1, d.get("rule"), d["severity"], d["message"])
        for d in report["generalDiagnostics"]
    }
    rules = {(line, rule) for line, rule, severity, _ in found if severity == "error"}
    assert (WRONG_LINE, "reportArgumentType") in rules, found
    assert (UNNEEDED_LINE, "reportUnnecessaryTypeIgnoreComment") in rules, found
    assert any(
        line == REVEAL_LINE and message.endswith('is "int"') for line, _, _, message in found
    ), found
