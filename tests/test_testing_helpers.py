"""The test helpers ``runtime.testing.reset()`` and
``runtime.testing.capture_effects()``, on both faces and every backend. The pytest
plugin's fixtures are tested in ``tests/test_pytest_plugin.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta

import pytest

from solid_objects import Actor, AsyncRuntime, EffectContext, Runtime
from solid_objects.errors import ConfigurationError, OperationRefused
from solid_objects.store.schema import SCHEMA_VERSION
from solid_objects.testing import CapturedEffect

from .conftest import FAST, count_rows

TABLES = ("actors", "messages", "effects", "reminders", "audit", "resolutions", "processes")


class Parcel(Actor):
    sent: int = 0
    confirmed: int = 0

    def ship(self, to: str) -> int:
        self.sent += 1
        self.emit("parcel_mail", to=to, on_success="confirm")
        self.schedule(delay=timedelta(days=1)).ship(to=to)
        return self.sent

    def confirm(self) -> None:
        self.confirmed += 1


def rows(rt: Runtime) -> dict[str, int]:
    return {t: count_rows(rt, t) for t in TABLES}


def test_reset_empties_every_table_only_where_allowed(
    make_runtime: Callable[..., Runtime],
) -> None:
    guarded = make_runtime(workers=0)
    rt = make_runtime(workers=0, allow_reset=True)
    rt.register(Parcel)
    rt.ref(Parcel, "p").ship.send(to="ann")
    rt.testing.drain()  # no handler: the effect stays pending; the reminder waits
    rt.ref(Parcel, "p").ship.with_options(delay=timedelta(hours=1)).send(to="bob")
    before = rows(rt)
    assert before["actors"] == 1 and before["messages"] == 2 and before["effects"] == 1
    with rt.store.read() as tx:
        first_pk = tx.scalar("SELECT pk FROM solid_actors")

    # the default refuses, and says why: it must never be easy on a production database
    with pytest.raises(ConfigurationError, match="allow_reset=True"):
        guarded.testing.reset()
    assert rows(rt) == before
    running = make_runtime(workers=1, allow_reset=True)
    with running:  # its workers run: refused
        with pytest.raises(OperationRefused, match="stop"):
            running.testing.reset()
    assert rows(rt) == before | {"processes": 1}  # it registered, and signed off

    rt.testing.reset()
    assert rows(rt) == dict.fromkeys(TABLES, 0)
    with rt.store.read() as tx:
        assert tx.scalar("SELECT version FROM solid_schema") == SCHEMA_VERSION
    # the runtime goes on working; an incarnation made now never reuses a pk
    sent = rt.ref(Parcel, "p").ship.send(to="cy")
    rt.testing.drain()
    assert sent.result() == 1
    with rt.store.read() as tx:
        assert tx.scalar("SELECT pk FROM solid_actors") > first_pk
    with pytest.raises(ConfigurationError, match="allow_reset"):
        make_runtime(allow_reset="yes")


def test_captured_effects_are_listed_and_their_handlers_held(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    ran: list[str] = []

    @rt.effect("parcel_mail")
    def mail(ctx: EffectContext, to: str) -> None:
        ran.append(to)

    parcel = rt.ref(Parcel, "c")
    with rt.testing.capture_effects() as effects:
        assert len(effects) == 0
        parcel.ship.send(to="ann")
        parcel.ship.send(to="bob")
        rt.testing.drain()
        assert effects.names() == ["parcel_mail", "parcel_mail"]  # read live in the block
    assert ran == []  # held: no handler ran
    assert [e.arguments for e in effects] == [{"to": "ann"}, {"to": "bob"}]
    first = effects[0]
    assert isinstance(first, CapturedEffect)
    assert (first.actor_type, first.actor_id, first.status) == ("Parcel", "c", "pending")
    assert [e.id for e in effects.named("parcel_mail")] == [e.id for e in effects]
    assert parcel.snapshot() == {"sent": 2, "confirmed": 0}

    # left pending: a drain after the block runs them, callbacks and all
    rt.testing.drain()
    assert ran == ["ann", "bob"] and parcel.snapshot()["confirmed"] == 2
    assert [e.status for e in effects] == ["pending", "pending"]  # fixed on leaving

    with rt.testing.capture_effects() as later:  # an earlier effect is not captured again
        rt.testing.drain()
    assert list(later) == []
    with pytest.raises(OperationRefused, match="context manager"):
        _ = rt.testing.capture_effects().effects
    with pytest.raises(OperationRefused, match="once"), later:
        pass


def test_captured_effects_with_workers_running(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(workers=2)
    ran: list[str] = []
    rt.effect("parcel_mail")(lambda ctx, to: ran.append(to))
    with rt:
        with rt.testing.capture_effects() as effects:
            assert rt.ref(Parcel, "w").ship(to="dee") == 1
        assert effects.names() == ["parcel_mail"]
        assert ran == []
    rt.testing.drain()
    assert ran == ["dee"]


def test_the_async_face_resets_and_captures(db_url: str) -> None:
    async def scenario() -> None:
        rt = AsyncRuntime(db_url, workers=0, allow_reset=True, **FAST)
        try:
            await rt.install()
            async with rt.testing.capture_effects() as effects:
                await rt.ref(Parcel, "a").ship.send(to="eve")
                await rt.testing.drain()
            assert effects.names() == ["parcel_mail"]
            await rt.testing.reset()
            assert count_rows(rt.sync, "effects") == 0 and count_rows(rt.sync, "actors") == 0
        finally:
            await rt.close()

    asyncio.run(scenario())


def test_ids_made_one_after_another_in_a_process_increase() -> None:
    """Within a millisecond too: the captured effects of successive turns list in order."""
    from solid_objects.store.rows import new_id

    ids = [new_id() for _ in range(5000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(len(i) == 32 for i in ids)
