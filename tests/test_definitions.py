"""Actor definitions: state fields, operations, and refusals at class-definition time."""

from __future__ import annotations

from typing import ClassVar

import pytest

from solid_objects import Actor, query
from solid_objects.actor import definition_of
from solid_objects.errors import InvalidActorDefinition


class Cart(Actor):
    items: list[str] = []
    owner: str = ""
    LIMIT: ClassVar[int] = 10
    _cache: dict[str, int] = {}

    def add(self, sku: str, qty: int = 1) -> int:
        self.items.extend([sku] * qty)
        return len(self.items)

    async def clear(self) -> None:
        self.items = []

    @query
    def size(self) -> int:
        return len(self.items)

    def _helper(self) -> None:
        pass


def test_state_operations_and_queries_are_introspected() -> None:
    d = definition_of(Cart)
    assert d.actor_type == "Cart"
    assert d.defaults == {"items": [], "owner": ""}
    assert set(d.operations) == {"add", "clear", "size"}
    assert d.operations["size"].is_query and not d.operations["add"].is_query
    assert d.operations["clear"].is_async


def test_mutable_defaults_are_copied_per_instance() -> None:
    d = definition_of(Cart)
    a = d.instantiate("a", d.default_state())
    b = d.instantiate("b", d.default_state())
    a.add("x")
    assert b.items == [] and Cart.items == []


def test_actor_type_can_be_set_explicitly() -> None:
    class Named(Actor):
        actor_type = "shop.Cart"

    assert definition_of(Named).actor_type == "shop.Cart"


@pytest.mark.parametrize(
    "body, message",
    [
        ("actor_id: str = 'x'", "reserved"),
        ("emit: int = 0", "reserved"),
        ("count: int", "needs a default"),
        ("def send(self) -> None: pass", "reserved"),
        ("def snapshot(self) -> None: pass", "reserved"),
        ("def op(self, *args: int) -> None: pass", r"\*args"),
        ("def op(self, **kw: int) -> None: pass", r"\*args"),
        ("def op(self, _private: int) -> None: pass", "'_'"),
        ("def __init__(self) -> None: pass", "__init__"),
        ("items = []", "mutable value"),
        (
            "value: int = 0\n    def value(self) -> int: return 1",
            "both a state field and an operation",
        ),
        ("state_version = 0", "state_version"),
        ("actor_type = 'has space'", "actor_type"),
        ("thing: object = object()", "JSON"),
        ("n: int = 'not a number'", "default state"),
    ],
)
def test_bad_definitions_are_refused_at_class_creation(body: str, message: str) -> None:
    source = f"class Bad(Actor):\n    {body}\n"
    with pytest.raises(InvalidActorDefinition, match=message):
        exec(source, {"Actor": Actor})


def test_annotated_private_attributes_are_not_state() -> None:
    assert "_cache" not in definition_of(Cart).defaults


def test_inherited_state_and_operations() -> None:
    class Base(Actor):
        a: int = 1

        def bump(self) -> int:
            self.a += 1
            return self.a

    class Child(Base):
        b: str = "x"

    d = definition_of(Child)
    assert d.defaults == {"a": 1, "b": "x"}
    assert "bump" in d.operations
