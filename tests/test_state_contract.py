"""State, incarnations and the inside-turn guard.

Each test names the promise it protects; all run on SQLite, PostgreSQL and MariaDB.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from enum import Enum
from typing import Annotated, Any

import pytest
from pydantic import Strict

from solid_objects import Actor, AsyncRuntime, Runtime
from solid_objects.admin import Administration, allow
from solid_objects.errors import InvalidArguments, MessageFailed, UnknownActorType

from .conftest import FAST, count_rows


class Color(Enum):
    A = "a"
    B = "b"


class Coerced(Actor):
    color: Color = Color.A
    pair: tuple[int, int] = (0, 0)
    n: int = 0

    def set_raw(self) -> None:
        self.color = "b"  # type: ignore[assignment]  # the commit coerces it to Color.B
        self.pair = [1, 2]  # type: ignore[assignment]  # ... and this to (1, 2)

    def step(self) -> int:
        self.n += 1 if self.color is Color.B else 100
        self.n += 0 if isinstance(self.pair, tuple) else 10
        return self.n

    def kinds(self) -> list[str]:
        return [type(self.color).__name__, type(self.pair).__name__]


def test_cached_state_after_a_turn_equals_what_a_reload_gives(
    make_runtime: Callable[..., Runtime],
) -> None:
    with make_runtime(workers=1) as rt:
        ref = rt.ref(Coerced, "c")
        ref.set_raw()
        cached = [ref.kinds(), ref.step(), ref.step(), ref.step()]
    with make_runtime(workers=1) as reloaded:  # a new process: the state is read back
        ref = reloaded.ref(Coerced, "c")
        again = ref.kinds()
        n = ref.step()
    assert cached == [["Color", "tuple"], 1, 2, 3]
    assert again == ["Color", "tuple"]
    assert n == 4


# --- actor code may not reach actors behind its turn's commit ---------------

FACES: list[Any] = []


class Target(Actor):
    hits: int = 0

    def hit(self) -> int:
        self.hits += 1
        return self.hits

    async def hit_async(self) -> int:
        self.hits += 1
        return self.hits


class Reacher(Actor):
    done: int = 0

    def destroy_other(self) -> None:
        FACES[0].ref(Target, "t").destroy()
        self.done += 1

    async def destroy_other_async(self) -> None:
        await FACES[0].ref(Target, "t").destroy()
        self.done += 1

    async def call_other_async(self) -> None:
        await FACES[0].ref(Target, "t").hit()
        self.done += 1

    async def send_other_async(self) -> None:
        await FACES[0].ref(Target, "t").hit.send()
        self.done += 1

    async def call_self_async(self) -> None:
        await FACES[0].ref(Reacher, self.actor_id).call(Reacher.destroy_other)
        self.done += 1


def _refused(message: Any) -> dict[str, Any]:
    with pytest.raises(MessageFailed) as info:
        message.wait(timeout=30)
    return info.value.error  # type: ignore[no-any-return]


def test_destroy_inside_a_turn_is_refused_and_destroys_nothing(
    make_runtime: Callable[..., Runtime],
) -> None:
    with make_runtime(workers=1) as rt:
        FACES[:] = [rt]
        assert rt.ref(Target, "t").hit() == 1
        error = _refused(rt.ref(Reacher, "r").destroy_other.send())
        FACES.clear()
        assert error["type"] == "CallInsideTurn"
        assert rt.ref(Target, "t").snapshot() == {"hits": 1}
        assert rt.ref(Target, "t").hit() == 2  # the same incarnation: nothing was destroyed
        assert rt.ref(Reacher, "r").snapshot() == {"done": 0}


@pytest.mark.parametrize(
    "operation",
    ["destroy_other_async", "call_other_async", "send_other_async", "call_self_async"],
)
def test_async_face_refuses_calls_sends_and_destroys_inside_a_turn(
    db_url: str, operation: str
) -> None:
    async def main() -> tuple[dict[str, Any], dict[str, Any], int, dict[str, Any]]:
        # call_timeout is short so that the old behaviour (waiting on its own mailbox)
        # fails the test in seconds instead of hanging.
        art = AsyncRuntime(db_url, workers=2, **{**FAST, "call_timeout": 3.0})
        await art.install()
        async with art:
            FACES[:] = [art]
            assert await art.ref(Target, "t").hit() == 1
            sent = await getattr(art.ref(Reacher, "r"), operation).send()
            with pytest.raises(MessageFailed) as info:
                await sent.wait(timeout=30)
            FACES.clear()
            target = await art.ref(Target, "t").snapshot()
            reacher = await art.ref(Reacher, "r").snapshot()
            messages = count_rows(art.sync, "messages", "actor_id = 't'")
        return info.value.error, target, messages, reacher

    error, target, messages, reacher = asyncio.run(main())
    assert error["type"] == "CallInsideTurn"
    assert target == {"hits": 1}
    assert messages == 1  # only the first call: nothing reached the target from the turn
    assert reacher == {"done": 0}


# --- keys that collide once converted are refused, not merged ------------------


LaxInt = Annotated[int, Strict(False)]


class Keyed(Actor):
    by_id: dict[int, int] = {}

    # Arguments are strict: these keys opt in to conversion, which is
    # where keys can collide.
    def total(self, values: dict[LaxInt, int]) -> int:
        return sum(values.values())

    def label(self, names: dict[LaxInt, str]) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(names.items()))

    def nested(self, groups: list[dict[LaxInt, int]] | None = None) -> int:
        return sum(sum(g.values()) for g in groups or [])

    def keep(self, raw: dict[str, int]) -> None:
        self.by_id = raw  # type: ignore[assignment]  # the commit converts the keys

    def echo(self, raw: dict[str, int]) -> dict[int, int]:
        return raw  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("operation", "arguments"),
    [
        ("label", {"names": {1: "a", "1": "b"}}),
        ("total", {"values": {"01": 1, "1": 2, " 1": 4}}),
        ("nested", {"groups": [{"2": 1}, {"1": 1, "01": 2}]}),
    ],
)
def test_argument_keys_that_collide_after_conversion_are_refused(
    make_runtime: Callable[..., Runtime], operation: str, arguments: dict[str, Any]
) -> None:
    rt = make_runtime(workers=0)
    handle = getattr(rt.ref(Keyed, "k"), operation)
    with pytest.raises(InvalidArguments, match="a value would be lost"):
        handle.send(**arguments)
    with pytest.raises(InvalidArguments, match="a value would be lost"):
        handle(**arguments)
    assert count_rows(rt, "messages") == 0
    assert count_rows(rt, "actors") == 0
    # keys that stay distinct are fine
    assert rt.ref(Keyed, "k").total.send(values={"1": 1, "2": 2, 3: 4}) is not None
    rt.testing.drain()
    assert count_rows(rt, "messages", "status = 'completed'") == 1


def test_state_and_results_whose_keys_collide_after_conversion_are_refused(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    ref = rt.ref(Keyed, "k")
    kept = ref.keep.send(raw={"1": 1, "2": 2})
    merged_state = ref.keep.send(raw={"1": 10, "01": 20})
    merged_result = ref.echo.send(raw={"3": 1, "03": 2})
    rt.testing.drain()
    assert kept.result() is None
    with pytest.raises(MessageFailed) as state_error:
        merged_state.result()
    with pytest.raises(MessageFailed) as result_error:
        merged_result.result()
    assert state_error.value.error["type"] == "InvalidState"
    assert "a value would be lost" in state_error.value.error["message"]
    assert result_error.value.error["type"] == "InvalidArguments"
    assert ref.snapshot() == {"by_id": {"1": 1, "2": 2}}
    assert count_rows(rt, "messages", "status = 'dead' AND attempts = 1") == 2


# --- every read path shows migrated state ----------------------------------------


class TallyV1(Actor):
    actor_type = "Tally"
    count: int = 0

    def bump(self) -> int:
        self.count += 1
        return self.count


class TallyV2(Actor):
    actor_type = "Tally"
    state_version = 2
    migrations = {1: lambda s: {"total": s["count"] * 10, "unit": "tens"}}
    total: int = 0
    unit: str = "ones"

    def bump(self) -> int:
        self.total += 1
        return self.total


def _ops(rt: Runtime) -> Administration:
    rt.admin.set_policy(allow({"ops:*": "*"}))
    return rt.admin.as_principal("ops:alice")


def test_admin_reads_show_state_migrated_like_snapshot(
    make_runtime: Callable[..., Runtime],
) -> None:
    v1 = make_runtime(workers=0)
    for _ in range(3):
        v1.ref(TallyV1, "a").bump.send()
    v1.ref(TallyV1, "fresh")  # known to v1 only as a reference: no row
    v1.testing.drain()
    v2 = make_runtime(workers=0)
    migrated = {"total": 30, "unit": "tens"}
    assert v2.ref(TallyV2, "a").snapshot() == migrated
    admin = _ops(v2)
    assert admin.actor_states("Tally", ["a", "missing"]) == {"a": migrated}
    detail = admin.inspect_actor("Tally", "a")
    assert (detail.state, detail.state_version, detail.state_migrated) == (migrated, 1, True)
    # Nothing was written by the reads: the row still holds version 1.
    assert count_rows(v2, "actors", "state_version = 1") == 1
    # A process that does not know the type cannot migrate: it says so.
    bare = _ops(make_runtime(workers=0))
    with pytest.raises(UnknownActorType):
        bare.actor_states("Tally", ["a"])
    stored = bare.inspect_actor("Tally", "a")
    assert (stored.state, stored.state_migrated) == ({"count": 3}, False)


# --- an effect's callback does not recreate a destroyed incarnation ---------------


class Emitter(Actor):
    log: list[str] = []

    def start(self, fail: bool = False) -> None:
        self.log.append("start")
        self.emit("destroy_then_answer", fail=fail, on_success="succeeded", on_failure="failed")

    def succeeded(self, effect_id: str) -> None:
        self.log.append("succeeded")

    def failed(self, effect_id: str) -> None:
        self.log.append("failed")

    def poke(self) -> list[str]:
        self.log.append("poke")
        return self.log


@pytest.mark.parametrize("fail", [False, True], ids=["on_success", "on_failure"])
def test_a_callback_after_destroy_does_not_recreate_the_incarnation(
    make_runtime: Callable[..., Runtime], fail: bool
) -> None:
    from solid_objects import Rejected

    rt = make_runtime(workers=0)
    destroyed: list[bool] = []

    @rt.effect("destroy_then_answer")
    def destroy_then_answer(ctx: Any, fail: bool) -> None:
        # The handler runs after the turn committed; the actor is destroyed before the
        # effect's outcome (and its callback) is recorded.
        destroyed.append(rt.ref(Emitter, ctx.actor_id).destroy())
        if fail:
            raise Rejected("declined")

    rt.ref(Emitter, "e").start.send(fail=fail)
    rt.testing.drain()
    assert destroyed == [True]
    assert count_rows(rt, "actors") == 0
    callback = "failed" if fail else "succeeded"
    assert count_rows(rt, "messages", f"operation = '{callback}' AND status = 'destroyed'") == 1
    assert rt.ref(Emitter, "e").snapshot() == {"log": []}
    # The next call starts a new incarnation that never saw the callback.
    assert rt.ref(Emitter, "e").poke.send() is not None
    rt.testing.drain()
    assert rt.ref(Emitter, "e").snapshot() == {"log": ["poke"]}


class _Count(int):
    pass


class _Label(str):
    pass


class ScalarStateReload(Actor):
    """Only plain int/str/bool fields: the turn skips the reload when they hold exactly those."""

    n: int = 0
    label: str = ""
    flag: bool = False

    def set_subclasses(self) -> None:
        self.n = _Count(5)
        self.label = _Label("x")
        self.flag = True

    def kinds(self) -> list[str]:
        return [type(self.n).__name__, type(self.label).__name__, type(self.flag).__name__]

    def bump(self) -> int:
        self.n += 1
        return self.n


def test_plain_scalar_state_after_a_turn_holds_exactly_what_a_reload_gives(
    make_runtime: Callable[..., Runtime],
) -> None:
    definition = ScalarStateReload.__solid_definition__
    assert definition._scalars == {"n": int, "label": str, "flag": bool}  # the shortcut applies
    with make_runtime(workers=1) as rt:
        ref = rt.ref(ScalarStateReload, "s")
        ref.set_subclasses()
        cached = [ref.kinds(), ref.bump(), ref.kinds()]
    assert cached == [["int", "str", "bool"], 6, ["int", "str", "bool"]]
