"""The layers of ``docs/architecture.md``: who may import whom, checked on the AST.

The store and the model are siblings: the store writes JSON text and never imports
the model (it reads a turn's staging as the records of ``writes.py``), and the model
never touches the store or the engine. Observability sits above the engine and is
not imported back by it at run time. Imports under ``if TYPE_CHECKING:`` are types
only and are not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "solid_objects"

#: The model layer: actor classes, their definitions and what a turn stages.
MODEL = {
    "actor",
    "declarations",
    "definition",
    "staging",
    "message",
    "registry",
    "observe",
    "projections",
    "reminders",
}
#: What sits above the store and the model.
ABOVE = {"engine", "runtime", "ref", "admin", "web", "cli", "contrib", "observability"}


def runtime_imports(path: Path) -> set[str]:
    """The ``solid_objects`` modules ``path`` imports outside ``if TYPE_CHECKING:``,
    as dotted names relative to the package (``store.rows``, ``staging``)."""
    tree = ast.parse(path.read_text())
    package = path.relative_to(SRC).with_suffix("").parts[:-1]
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for n in ast.walk(node))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                target = ".".join(base + ([node.module] if node.module else []))
                names = [target] if node.module else [a.name for a in node.names]
            elif node.module and node.module.startswith("solid_objects"):
                names = [node.module.removeprefix("solid_objects").lstrip(".")]
            else:
                continue
            found.update(n for n in names if n)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("solid_objects."):
                    found.add(alias.name.removeprefix("solid_objects."))
    return found


def top(name: str) -> str:
    return name.split(".")[0]


def violations(modules: list[Path], forbidden: set[str]) -> list[str]:
    return [
        f"{path.relative_to(SRC)} imports {name}"
        for path in modules
        for name in sorted(runtime_imports(path))
        if top(name) in forbidden
    ]


def test_the_store_imports_neither_the_model_nor_what_sits_above_it() -> None:
    store = sorted((SRC / "store").glob("*.py"))
    assert store
    assert violations(store, MODEL | ABOVE) == []


def test_the_model_imports_neither_the_store_nor_the_engine() -> None:
    model = [SRC / f"{name}.py" for name in sorted(MODEL)]
    assert violations(model, {"store"} | ABOVE) == []


def test_observability_does_not_import_the_engine_back_at_run_time() -> None:
    """The engine reports to ``observability.events``; nothing there imports the engine."""
    observability = sorted((SRC / "observability").glob("*.py"))
    assert observability
    assert violations(observability, {"engine"}) == []


def test_the_checker_sees_a_relative_import_of_the_model() -> None:
    """The check itself: ``from ..staging import Staged`` in the store is a violation."""
    found = runtime_imports(SRC / "engine" / "turn.py")
    assert "staging" in found and "store" in found


def test_the_faces_reach_the_engine_only_through_the_runtime() -> None:
    """``ref.py`` builds a ``Call`` and hands it to ``runtime.kernel.client``: it imports
    the model and the foundation, never the engine or the store."""
    assert violations([SRC / "ref.py"], {"engine", "store"}) == []
