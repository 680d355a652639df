"""The typed call form passes mypy --strict, basedpyright and pyright (design 3, "typed
references"); the attribute form (``ref.add(sku="x")``) is checked by mypy through the
``solid_objects.mypy`` plugin, and pyright's view of it is pinned down too (docs/typing.md).

``tests/typing/check_refs.py`` and ``check_attributes.py`` hold the contract:
``assert_type`` lines that must hold and wrong calls whose ignore comments must stay
necessary. These tests run the checkers on that folder in a subprocess, and run them
on deliberately wrong files as negative controls, so the check cannot pass vacuously
(a checker that silently sees ``Any``, skips the file or ignores unused ignores would
fail the control).
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

# The attribute form with the usual mistakes, none carrying an ignore comment:
# each one must be an error under mypy with the plugin (the codes below, line by line).
ATTRIBUTE_CONTROL = """\
from typing import reveal_type

from solid_objects import Actor, AsyncRuntime, Runtime


class CtlMailer(Actor):
    sent: int = 0

    def deliver(self, to: str) -> None:
        self.sent += len(to)


class CtlCart(Actor):
    items: list[str] = []

    def add(self, sku: str) -> int:
        self.items.append(sku)
        self.send_to(CtlMailer, "o").ad(sku=1)
        self.schedule(delay=60).remnd()
        return len(self.items)

    def remind(self) -> None:
        self.send_to(CtlMailer, "o").deliver(to=1)


def sync_face(runtime: Runtime) -> None:
    ref = runtime.ref(CtlCart, "c")
    ref.add(skuu="x")
    t: str = ref.add(sku="x")
    ref.addd()
    ref.add.send(sku=2)
    reveal_type(ref.add(sku="x"))
    print(t)


async def async_face(runtime: AsyncRuntime) -> None:
    ref = runtime.ref(CtlCart, "c")
    await ref.add(skuu="x")
    t: str = await ref.add(sku="x")
    await ref.addd()
    await ref.add.send(sku=2)
    reveal_type(await ref.add(sku="x"))
    print(t)
"""
ATTRIBUTE_MISTAKES = {
    18: "attr-defined",  # self.send_to(CtlMailer, "o").ad(sku=1)
    19: "attr-defined",  # self.schedule(delay=60).remnd()
    23: "arg-type",  # self.send_to(CtlMailer, "o").deliver(to=1)
    28: "call-arg",  # ref.add(skuu="x")
    29: "assignment",  # t: str = ref.add(sku="x")
    30: "attr-defined",  # ref.addd()
    31: "arg-type",  # ref.add.send(sku=2)
    38: "call-arg",  # await ref.add(skuu="x")
    39: "assignment",  # t: str = await ref.add(sku="x")
    40: "attr-defined",  # await ref.addd()
    41: "arg-type",  # await ref.add.send(sku=2)
}
ATTRIBUTE_REVEALS = (32, 42)


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=110)


def _mypy(*paths: Path, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    # The checkers are in the [dev] extra: a missing one is a broken setup, not a skip.
    if importlib.util.find_spec("mypy") is None:
        pytest.fail("mypy is not installed (pip install -e '.[dev]')")
    # Run from the root, mypy reads pyproject's [tool.mypy], which enables the plugin.
    chosen = [] if config is None else ["--config-file", str(config)]
    return _run([sys.executable, "-m", "mypy", "--strict", *chosen, *map(str, paths)])


def _basedpyright_command() -> list[str]:
    found = shutil.which("basedpyright", path=str(Path(sys.executable).parent)) or shutil.which(
        "basedpyright"
    )
    if found is None:
        pytest.fail("basedpyright is not installed (pip install -e '.[dev]')")
    return [found, "--pythonpath", sys.executable]


def _pyright_command(tmp_path: Path) -> list[str]:
    """Plain pyright, configured as check_refs.py expects: it reads only its own ignores.

    pyright honours ``# type: ignore`` by default (basedpyright does not), which would
    make every ``# pyright: ignore`` in the contract look unnecessary.
    """
    found = shutil.which("pyright", path=str(Path(sys.executable).parent)) or shutil.which(
        "pyright"
    )
    if found is None:
        pytest.fail("pyright is not installed (pip install -e '.[dev]')")
    config = tmp_path / "pyrightconfig.json"
    settings = {"enableTypeIgnoreComments": False, "extraPaths": [str(ROOT / "src")]}
    config.write_text(json.dumps(settings), encoding="utf-8")
    return [found, "--pythonpath", sys.executable, "--project", str(config)]


def _report(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    try:
        report: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"the checker printed no JSON report:\n{done.stdout}\n{done.stderr}")
    return report


def _basedpyright_json(path: Path) -> dict[str, Any]:
    return _report(_run([*_basedpyright_command(), "--outputjson", str(path)]))


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
    assert "Success: no issues found in 2 source files" in done.stdout


def test_contract_passes_basedpyright() -> None:
    done = _run([*_basedpyright_command(), str(TYPING_DIR)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 errors, 0 warnings" in done.stdout, done.stdout


def test_contract_passes_pyright(tmp_path: Path) -> None:
    done = _run([*_pyright_command(tmp_path), str(TYPING_DIR)])
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


@pytest.fixture
def attribute_control(tmp_path: Path) -> Path:
    path = tmp_path / "attribute_control.py"
    path.write_text(ATTRIBUTE_CONTROL, encoding="utf-8")
    lines = ATTRIBUTE_CONTROL.splitlines()
    assert ".ad(sku=1)" in lines[18 - 1] and "ref.addd()" in lines[40 - 1]
    assert all("reveal_type(" in lines[line - 1] for line in ATTRIBUTE_REVEALS)
    return path


def _errors(out: str, name: str) -> dict[int, str]:
    found = re.findall(rf"^.*{re.escape(name)}:(\d+): error: .*\[([a-z-]+)\]$", out, re.M)
    return {int(line): code for line, code in found}


def test_mypy_plugin_rejects_each_attribute_form_mistake(attribute_control: Path) -> None:
    done = _mypy(attribute_control)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    # Every mistake of the list, on both faces and in staged sends and reminders, is an
    # error with its code, and nothing else is.
    assert _errors(out, attribute_control.name) == ATTRIBUTE_MISTAKES, out
    for line in ATTRIBUTE_REVEALS:  # the result is the operation's, not Any
        assert re.search(
            rf'{attribute_control.name}:{line}: note: Revealed type is "(builtins\.)?int"', out
        ), out


def test_without_the_plugin_mypy_sees_no_attribute_mistake(
    attribute_control: Path, tmp_path: Path
) -> None:
    """What the plugin adds: the same file passes plain mypy --strict (Any everywhere)."""
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nstrict = True\n", encoding="utf-8")
    done = _mypy(attribute_control, config=config)
    out = done.stdout
    assert _errors(out, attribute_control.name) == {}, out
    assert f'{attribute_control.name}:32: note: Revealed type is "Any"' in out, out


@pytest.mark.parametrize("checker", ["basedpyright", "pyright"])
def test_pyright_sees_the_attribute_form_as_any(
    checker: str, attribute_control: Path, tmp_path: Path
) -> None:
    """pyright has no plugins: the attribute form is Any there (docs/typing.md says so).

    If a pyright release ever checks it, this test fails and the documentation changes.
    """
    command = _basedpyright_command() if checker == "basedpyright" else _pyright_command(tmp_path)
    report = _report(_run([*command, "--outputjson", str(attribute_control)]))
    found = {
        (d["range"]["start"]["line"] + 1, d.get("rule"), d["message"])
        for d in report["generalDiagnostics"]
        if d["severity"] == "error"
    }
    assert found == set(), found
    reveals = [
        d["message"]
        for d in report["generalDiagnostics"]
        if d["range"]["start"]["line"] + 1 in ATTRIBUTE_REVEALS and d["severity"] == "information"
    ]
    assert reveals and all(message.endswith('is "Any"') for message in reveals), reveals


# Requests: the staged call is checked like a send and returns the request id (str).
REQUEST_CONTROL = """\
from typing import reveal_type

from solid_objects import Actor, Reply


class ReqVault(Actor):
    balance: int = 0

    def withdraw(self, amount: int) -> int:
        self.balance -= amount
        return self.balance


class ReqTeller(Actor):
    def ask(self) -> None:
        self.request(ReqVault, "v", reply_to=self.on_funds).withdrw(amount=1)
        self.request(ReqVault, "v", reply_to=self.on_funds).withdraw(amount="1")
        n: int = self.request(ReqVault, "v", reply_to=self.on_funds).withdraw(amount=1)
        reveal_type(self.request(ReqVault, "v", reply_to=self.on_funds).withdraw(amount=1))
        reveal_type(self.request(ReqVault, "v", reply_to=self.on_funds).call(ReqVault.withdraw, 1))
        print(n)

    def on_funds(self, reply: Reply) -> None:
        pass
"""
REQUEST_MISTAKES = {
    16: "attr-defined",  # .withdrw(amount=1)
    17: "arg-type",  # .withdraw(amount="1")
    18: "assignment",  # n: int = <request id>
}
REQUEST_REVEALS = (19, 20)


def test_mypy_plugin_types_a_request_and_its_request_id(tmp_path: Path) -> None:
    path = tmp_path / "request_control.py"
    path.write_text(REQUEST_CONTROL, encoding="utf-8")
    assert ".withdrw(" in REQUEST_CONTROL.splitlines()[16 - 1]
    done = _mypy(path)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert _errors(out, path.name) == REQUEST_MISTAKES, out
    for line in REQUEST_REVEALS:
        revealed = rf'{path.name}:{line}: note: Revealed type is "(builtins\.)?str"'
        assert re.search(revealed, out), out
