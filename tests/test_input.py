"""Bad input gets a clear, typed error and writes nothing (contract 2.8)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from solid_objects import Actor, Runtime
from solid_objects.errors import (
    ConfigurationError,
    IdempotencyConflict,
    InvalidActorDefinition,
    InvalidActorId,
    InvalidArguments,
    PayloadTooLarge,
    UnknownOperation,
)

from .conftest import count_rows


class Store(Actor):
    stock: dict[str, int] = {}

    def put(self, sku: str, qty: int = 1) -> int:
        self.stock[sku] = self.stock.get(sku, 0) + qty
        return self.stock[sku]

    def blob(self, data: Any) -> None:
        pass

    def _secret(self) -> None:
        pass


def assert_nothing_written(rt: Runtime) -> None:
    assert count_rows(rt, "messages") == 0
    assert count_rows(rt, "actors") == 0


@pytest.mark.parametrize(
    "invoke, error",
    [
        (lambda r: r.put(sku=1), InvalidArguments),
        (lambda r: r.put(sku="a", qty="many"), InvalidArguments),
        (lambda r: r.put(qty=1), InvalidArguments),
        (lambda r: r.put(sku="a", colour="red"), InvalidArguments),
        (lambda r: r.put("a", 1, 2), InvalidArguments),
        (lambda r: r.put("a", sku="b"), InvalidArguments),
        (lambda r: r.blob(data=math.nan), InvalidArguments),
        (lambda r: r.blob(data=math.inf), InvalidArguments),
        (lambda r: r.blob(data=object()), InvalidArguments),
        (lambda r: r.blob(data={1: "int keys are fine in JSON objects only as text"}), None),
        (lambda r: r.blob(data="\ud800"), InvalidArguments),
        (lambda r: r.blob(data={1: "a", "1": "b"}), InvalidArguments),  # one would be lost
        (lambda r: r.blob(data=[{True: 1, "true": 2}]), InvalidArguments),
        (lambda r: r.blob(data="x" * (2 << 20)), PayloadTooLarge),
        (lambda r: r.nope(), UnknownOperation),
        (lambda r: r._secret(), UnknownOperation),
        (lambda r: r.with_options(idempotency_key="").put(sku="a"), InvalidActorId),
        (lambda r: r._ref.put.with_options(delay=-1).send(sku="a"), InvalidArguments),
        (lambda r: r._ref.put.with_options(timeout="soon").send(sku="a"), InvalidArguments),
        (lambda r: r.call(print, "x"), UnknownOperation),
    ],
)
def test_bad_calls_are_refused_before_anything_is_written(
    make_runtime: Callable[..., Runtime], invoke: Callable[[Any], Any], error: type | None
) -> None:
    rt = make_runtime(workers=0)
    ref = rt.ref(Store, "s")
    if error is None:  # control: a valid call does write, so the checks below can fail
        invoke(_sender(ref))
        assert count_rows(rt, "messages") == 1
        return
    with pytest.raises(error):
        invoke(_sender(ref))
    assert_nothing_written(rt)


class _sender:
    """Turn ``ref.op(...)`` into ``ref.op.send(...)`` so nothing waits for a worker."""

    def __init__(self, ref: Any) -> None:
        self._ref = ref

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._ref, name)
        if name in ("with_options", "call"):
            return attr
        return attr.send


@pytest.mark.parametrize(
    "actor_id",
    ["", "x" * 256, "line\nbreak", "nul\x00", 42, None, b"bytes", "\udcff"],
)
def test_malformed_actor_ids_are_refused(
    make_runtime: Callable[..., Runtime], actor_id: Any
) -> None:
    rt = make_runtime(workers=0)
    with pytest.raises(InvalidActorId):
        rt.ref(Store, actor_id).put.send(sku="a")
    assert_nothing_written(rt)


def test_unusual_but_valid_ids_and_arguments_round_trip(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    ids = ["ünïcødé-✓", "'; DROP TABLE solid_actors; --", "a" * 255, "emoji 🎉"]
    messages = [rt.ref(Store, i).put.send(sku=i, qty=2) for i in ids]
    rt.testing.drain()
    assert [m.result() for m in messages] == [2, 2, 2, 2]
    assert rt.ref(Store, ids[1]).snapshot() == {"stock": {ids[1]: 2}}


def test_idempotency_conflict_writes_nothing_new(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(workers=0)
    ref = rt.ref(Store, "i")
    ref.put.with_options(idempotency_key="k").send(sku="a")
    with pytest.raises(IdempotencyConflict):
        ref.put.with_options(idempotency_key="k").send(sku="b")
    with pytest.raises(IdempotencyConflict):
        ref.blob.with_options(idempotency_key="k").send(data=None)
    assert count_rows(rt, "messages") == 1


def test_unregistrable_classes_are_refused(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(workers=0)
    with pytest.raises(InvalidActorDefinition):
        rt.ref(dict, "x")  # type: ignore[type-var]

    class Other(Actor):
        actor_type = "Store"

    with pytest.raises(InvalidActorDefinition, match="already registered"):
        rt.ref(Store, "x")
        rt.ref(Other, "x")


@pytest.mark.parametrize(
    "options",
    [
        {"lease_duration": 0},
        {"lease_duration": "30"},
        {"workers": -1},
        {"workers": 1.5},
        {"workers": 10**30},
        {"pool_size": 0},
        {"max_attempts": 0},
        {"sqlite_synchronous": "OFF"},
        {"table_prefix": "Bad-Prefix"},
        {"no_such_option": 1},
    ],
)
def test_bad_options_are_refused(db_url: str, options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        Runtime(db_url, **options)


@pytest.mark.parametrize("url", ["not a url", "sqlite://", "sqlite:///:memory:", "nosuchdb://x/y"])
def test_bad_database_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigurationError):
        Runtime(url)
