"""``runtime.admin`` is composed of parts, not assembled from mixins.

An AST check over ``src/solid_objects/admin/``: no class there inherits from
another class of the package, so no part declares attributes it expects another
to provide; and the composed API still offers every public name it had.
"""

from __future__ import annotations

import ast
from pathlib import Path

from solid_objects import Runtime

ADMIN = Path(__file__).resolve().parents[1] / "src" / "solid_objects" / "admin"

#: Every public name of ``runtime.admin``; the composition keeps them all.
PUBLIC = {
    "activity", "actor_history", "actor_messages", "actor_states", "actors",
    "actors_with_pending_work", "allowed", "as_principal", "audit_log", "cancel_message",
    "cancel_reminder", "destroy_actor", "discard_dead_letter", "discard_dead_letters",
    "effect_limits", "expire_actors", "fork_actor", "get_dead_letter", "get_effect",
    "inspect_actor", "list_actors", "list_dead_letters", "list_effects", "list_processes",
    "list_reminders", "orphans", "pause_actor", "pause_reminder", "policy", "principal",
    "prune", "quiet_actors", "recover_process", "resume_actor", "resume_reminder",
    "retry_dead_letter", "retry_dead_letters", "retry_effect", "retry_effects",
    "retrying_messages", "run_reminder_now", "set_policy", "status", "try_cancel_message",
    "turn_limits",
}  # fmt: skip


def inheritance_within(source: str, where: str, local: set[str]) -> list[str]:
    """``class X(Y)`` where ``Y`` is a class defined in the admin package."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id in local:
                    found.append(f"{where}:{node.lineno}: {node.name}({base.id})")
    return found


def admin_classes() -> set[str]:
    return {
        node.name
        for path in ADMIN.glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    }


def test_no_admin_class_inherits_from_another() -> None:
    local = admin_classes()
    found = [
        f
        for path in sorted(ADMIN.glob("*.py"))
        for f in inheritance_within(path.read_text(), path.name, local)
    ]
    assert found == []


def test_the_check_finds_a_mixin() -> None:
    source = "class Base:\n    pass\nclass Part(Base):\n    x: int\n"
    assert inheritance_within(source, "m.py", {"Base", "Part"}) == ["m.py:3: Part(Base)"]


def test_the_composed_api_offers_every_public_name(tmp_path: Path) -> None:
    runtime = Runtime(f"sqlite:///{tmp_path / 'admin.db'}")
    try:
        for admin in (runtime.admin, runtime.admin.as_principal("ops:x")):
            assert {n for n in dir(admin) if not n.startswith("_")} == PUBLIC
            methods = PUBLIC - {"actors", "policy", "principal"}
            assert all(callable(getattr(admin, n)) for n in methods)
        assert runtime.admin.as_principal("ops:x").policy is runtime.admin.policy
    finally:
        runtime.close()
