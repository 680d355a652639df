"""``snapshot(include=...)``: values derived from the committed state, on request.

All run on SQLite, PostgreSQL and MariaDB.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from solid_objects import Actor, AsyncRuntime, AuthorizationRequest, Runtime, projection, query
from solid_objects.errors import InvalidArguments, QueryMutatedState, Unauthorized


class Order(Actor, auto_register=False):
    lines: dict[str, int] = {}
    note: str = ""

    def add(self, sku: str, n: int = 1) -> int:
        self.lines = {**self.lines, sku: self.lines.get(sku, 0) + n}
        return self.units

    @property
    def units(self) -> int:
        return sum(self.lines.values())

    @query
    def skus(self) -> list[str]:
        return sorted(self.lines)

    @query
    def has(self, sku: str) -> bool:
        return sku in self.lines

    @query
    def secret(self) -> str:
        return "hidden"

    @query
    def sneaky(self) -> int:
        self.note = "changed"
        return 1

    @projection
    def biggest(self) -> int:
        return max(self.lines.values(), default=0)


def test_derived_values_come_on_request_from_the_committed_state(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0, actors=[Order])
    ref = rt.ref(Order, "o")
    ref.add.send(sku="tea", n=2)
    ref.add.send(sku="jam", n=3)
    rt.testing.drain()
    assert ref.snapshot() == {"lines": {"tea": 2, "jam": 3}, "note": ""}  # unchanged default
    assert ref.snapshot(include=("units", "skus", "biggest")) == {
        "lines": {"tea": 2, "jam": 3},
        "note": "",
        "units": 5,
        "skus": ["jam", "tea"],
        "biggest": 3,
    }
    assert rt.ref(Order, "never").snapshot(include=["units"]) == {
        "lines": {},
        "note": "",
        "units": 0,
    }


def test_names_that_are_not_derived_values_are_refused_before_any_read(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0, actors=[Order])
    ref = rt.ref(Order, "o")
    with pytest.raises(InvalidArguments, match="no property"):
        ref.snapshot(include=("lines",))  # a state field is already in the snapshot
    with pytest.raises(InvalidArguments, match="needs arguments"):
        ref.snapshot(include=("has",))
    with pytest.raises(InvalidArguments, match="no property"):
        ref.snapshot(include=("add",))  # an operation is not a derived value
    with pytest.raises(InvalidArguments, match="not one string"):
        ref.snapshot(include="units")  # type: ignore[arg-type]
    with pytest.raises(QueryMutatedState):
        ref.snapshot(include=("sneaky",))


def test_an_included_query_is_authorized_under_its_own_name(
    make_runtime: Callable[..., Runtime],
) -> None:
    asked: list[Any] = []

    def policy(request: AuthorizationRequest) -> bool:
        asked.append(request.operation)
        return request.operation != "secret"

    rt = make_runtime(workers=0, actors=[Order], authorize_query=policy)
    ref = rt.ref(Order, "o")
    assert ref.snapshot(include=("skus",))["skus"] == []
    with pytest.raises(Unauthorized):
        ref.snapshot(include=("secret",))
    assert "secret" in asked and None in asked


def test_the_async_face_includes_the_same_values(
    make_runtime: Callable[..., Runtime], db_url: str
) -> None:
    rt = make_runtime(workers=0, actors=[Order])
    rt.ref(Order, "o").add.send(sku="tea")
    rt.testing.drain()

    async def main() -> Any:
        face = AsyncRuntime(db_url, workers=0, actors=[Order])
        try:
            return await face.ref(Order, "o").snapshot(include=("units", "skus"))
        finally:
            await face.close()

    assert asyncio.run(main()) == rt.ref(Order, "o").snapshot(include=("units", "skus"))
