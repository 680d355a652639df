"""Finding actors by id prefix: ``admin.list_actors(type, id_prefix=...)``.

The prefix is a range over the identity index, not ``LIKE``: ``%`` and ``_`` are plain
characters, and ids compare by code point on every backend. Runs on every backend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from solid_objects import Actor, Runtime
from solid_objects.admin import Administration, allow
from solid_objects.errors import InvalidArguments
from solid_objects.store.admin import prefix_upper_bound

MAX = "\U0010ffff"
IDS = [
    "a", "a%", "a%1", "a%2", "a_", "a_x", "aX", "ab", "b",
    "e1", "é1", "é2", "éa", "f",
    "x\ud7ff", "x\ud7ff1", "x\ue000",  # U+D7FF: the last code point before the surrogates
    "m" + MAX, "m" + MAX + "1", "n",
]  # fmt: skip


class Probe(Actor):
    seen: int = 0

    def touch(self) -> None:
        self.seen += 1

    def flaky(self) -> None:
        raise ConnectionError("down")  # retryable: the actor waits for its retry


def _ops(make_runtime: Callable[..., Runtime]) -> Administration:
    rt = make_runtime(workers=0)
    rt.register(Probe)
    for actor_id in IDS:
        rt.ref(Probe, actor_id).touch.send()
    rt.testing.drain()
    rt.admin.set_policy(allow({"ops:*": "*"}))
    return rt.admin.as_principal("ops:alice")


def _all(ops: Administration, prefix: str, limit: int = 50) -> list[str]:
    """Every page of the search, following the cursors."""
    found: list[str] = []
    cursor = None
    while True:
        page = ops.list_actors("Probe", id_prefix=prefix, limit=limit, cursor=cursor)
        found += [a.actor_id for a in page.items]
        cursor = page.next_cursor
        if cursor is None:
            return found


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        ("a", ["a", "a%", "a%1", "a%2", "aX", "a_", "a_x", "ab"]),  # code point order
        ("a%", ["a%", "a%1", "a%2"]),  # % is no wildcard: a_ and ab stay out
        ("a_", ["a_", "a_x"]),  # nor is _
        ("é", ["é1", "é2", "éa"]),  # no accent folding: e1 stays out
        ("x\ud7ff", ["x\ud7ff", "x\ud7ff1"]),  # upper bound skips the surrogates
        ("m" + MAX, ["m" + MAX, "m" + MAX + "1"]),  # the last code point cannot grow
        ("zz", []),
    ],
)
def test_prefix_search_pages_through_exactly_the_matches(
    make_runtime: Callable[..., Runtime], prefix: str, expected: list[str]
) -> None:
    ops = _ops(make_runtime)
    assert _all(ops, prefix) == expected
    assert _all(ops, prefix, limit=1) == expected  # one per page: the cursor stays in range


def test_a_cursor_pages_within_the_prefix(make_runtime: Callable[..., Runtime]) -> None:
    ops = _ops(make_runtime)
    first = ops.list_actors("Probe", id_prefix="a%", limit=2)
    assert [a.actor_id for a in first.items] == ["a%", "a%1"]
    rest = ops.list_actors("Probe", id_prefix="a%", limit=2, cursor=first.next_cursor)
    assert [a.actor_id for a in rest.items] == ["a%2"] and rest.next_cursor is None
    assert ops.list_actors("Other", id_prefix="a").items == []


@pytest.mark.parametrize("bad", ["", "a\x00", "a ", "\udcff", "x" * 256])
def test_a_bad_prefix_is_invalid_arguments(make_runtime: Callable[..., Runtime], bad: str) -> None:
    ops = _ops(make_runtime)
    with pytest.raises(InvalidArguments, match="id prefix"):
        ops.list_actors("Probe", id_prefix=bad)


def test_upper_bound() -> None:
    assert prefix_upper_bound("ab") == "ac"
    assert prefix_upper_bound("a" + MAX) == "b"
    assert prefix_upper_bound(MAX + MAX) is None
    assert prefix_upper_bound("x\ud7ff") == "x\ue000"


def test_status_counts_actors_up_to_a_cap_and_the_rest_exactly(
    make_runtime: Callable[..., Runtime],
) -> None:
    """The overview's ``status(actors_up_to=N)``: the actors of a type counted up to N
    (``actors_capped`` says there are more), queued/paused/leases as exact as without."""
    rt = make_runtime(workers=0, retry_base_delay=3600, retry_max_delay=3600)
    rt.register(Probe)
    for i in range(5):
        rt.ref(Probe, f"p{i}").touch.send()
    rt.testing.drain()
    rt.ref(Probe, "p0").touch.send()
    rt.ref(Probe, "p0").touch.send()
    rt.ref(Probe, "p1").touch.send()
    rt.ref(Probe, "p3").flaky.send()
    rt.ref(Probe, "p3").touch.send()
    rt.testing.drain()  # p0 and p1 run; p3 fails and waits an hour for its retry
    rt.ref(Probe, "p0").touch.send()
    rt.ref(Probe, "p0").touch.send()
    rt.ref(Probe, "p1").touch.send()
    rt.admin.set_policy(allow({"ops:*": "*"}))
    ops = rt.admin.as_principal("ops:alice")
    ops.pause_actor("Probe", "p2")
    exact = ops.status()
    (probe,) = exact.types
    assert (probe.actors, probe.actors_capped, probe.queued, probe.paused) == (5, False, 5, 1)
    assert probe.retrying == 1
    capped = ops.status(actors_up_to=3)
    (three,) = capped.types
    assert (three.actors, three.actors_capped) == (3, True)
    assert (capped.total.actors, capped.total.actors_capped) == (3, True)
    assert dataclasses.replace(three, actors=5, actors_capped=False) == probe
    assert ops.status(actors_up_to=5).types[0].actors_capped is False
    for bad in (0, -1, True, 1.5, "10"):
        with pytest.raises(InvalidArguments, match="actors_up_to"):
            ops.status(actors_up_to=bad)  # type: ignore[arg-type]
