"""The shape of the ``solid_objects.cli`` package: every command module builds on the
public names of ``cli.common`` and on nothing private of another module, so the
commands can grow without import cycles (docs/architecture.md)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import solid_objects.cli

PACKAGE = Path(solid_objects.cli.__file__).parent
COMMAND_MODULES = ("worker", "inspection", "operations")


def relative_imports(module: str) -> list[tuple[str, str]]:
    """``(module, name)`` for each ``from .module import name`` in ``cli/<module>.py``."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    return [
        (node.module or "", alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 1
        for alias in node.names
    ]


def test_command_modules_import_only_public_names_of_common() -> None:
    for module in COMMAND_MODULES:
        imports = relative_imports(module)
        assert imports, module
        assert {source for source, _ in imports} == {"common"}, (module, imports)
        private = [name for _, name in imports if name.startswith("_")]
        assert not private, (module, private)


def test_common_imports_no_command_module() -> None:
    assert relative_imports("common") == []


def test_every_command_is_registered_on_the_console_script_group() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "solid_objects", "--help"],
        env={"PYTHONPATH": str(PACKAGE.parents[1]), "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    commands = done.stdout.split("Commands:")[1].split()
    for name in (
        "worker", "install", "quickstart", "status", "actors", "inspect", "dead-letters",
        "effects", "audit", "pause", "resume", "pending", "reminders", "processes", "prune",
        "doctor", "health",
    ):  # fmt: skip
        assert name in commands, name
