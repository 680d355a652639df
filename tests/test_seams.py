"""The library's parts reach the runtime's internals through ``runtime.kernel`` only.

An AST check over ``src/``: no module (the faces' own included: ``AsyncRuntime``
wraps a ``Runtime`` through its public names) reads an underscore attribute that
``Runtime`` or ``AsyncRuntime`` defines (``runtime.kernel.pool``,
``ref._runtime._client``, ``faces.sync._listener``, ...). Those are the runtime's
own; the kernel (``engine/kernel.py``) is the seam the others use.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "solid_objects"
RUNTIME = SRC / "runtime"
FACES = {"Runtime", "AsyncRuntime"}


def private_names_of_the_runtime() -> set[str]:
    """Underscore attributes and methods ``Runtime`` and ``AsyncRuntime`` define."""
    names: set[str] = set()
    for node in (n for p in RUNTIME.glob("*.py") for n in ast.walk(ast.parse(p.read_text()))):
        if not (isinstance(node, ast.ClassDef) and node.name in FACES):
            continue
        for item in ast.walk(node):
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(item.name)
            elif (
                isinstance(item, ast.Attribute)
                and isinstance(item.ctx, ast.Store)
                and isinstance(item.value, ast.Name)
                and item.value.id == "self"
            ):
                names.add(item.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def reaches(source: str, where: str, private: set[str]) -> list[str]:
    """``x._name`` reads of the runtime's private names where ``x`` is not ``self``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in private
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append(f"{where}:{node.lineno}: .{node.attr}")
    return found


def test_the_runtime_defines_the_private_names_this_check_looks_for() -> None:
    private = private_names_of_the_runtime()
    assert {"_pool", "_client", "_listener", "_notices", "_run"} <= private


def test_no_module_reaches_into_the_runtime_s_private_attributes() -> None:
    private = private_names_of_the_runtime()
    found = [
        reach
        for path in sorted(SRC.rglob("*.py"))
        for reach in reaches(path.read_text(), str(path.relative_to(SRC.parent)), private)
    ]
    assert found == [], "use runtime.kernel instead:\n" + "\n".join(found)


def test_the_check_finds_a_reach_and_spares_self() -> None:
    source = "def f(runtime):\n    return runtime._pool.held()\n\n\ndef g(self):\n    self._pool\n"
    assert reaches(source, "planted.py", {"_pool"}) == ["planted.py:2: ._pool"]
