# pyright: reportAssertTypeFailure=false, reportUnnecessaryTypeIgnoreComment=false, reportUnusedCoroutine=false, reportUnusedCallResult=false
"""Static typing contract of the attribute form, ``ref.add(sku="x")`` (checked, never run).

    .venv/bin/mypy --strict tests/typing        # with plugins = ["solid_objects.mypy"]

mypy reads each operation off the actor class through the ``solid_objects.mypy``
plugin (enabled in pyproject's ``[tool.mypy]``). Every ``assert_type`` line must hold,
and every line in the "rejected" sections carries a ``# type: ignore[code]`` that
must stay *necessary* (``--warn-unused-ignores``, part of ``--strict``): a mistake
that stops being an error fails the check. Without the plugin every ignore below is
unused, so the check fails: it cannot pass vacuously.

pyright has no plugins and sees ``ref.add`` as ``OperationHandle[..., Any]``: the
header above (and the ``reportAny`` ignores basedpyright reads) turn off, for this file
only, the pyright checks that would report that; ``tests/test_typing.py``
proves what pyright does and does not see here. ``check_refs.py`` holds the call
form ``ref.call(Cart.add, ...)``, which both checkers check.
"""

from __future__ import annotations

from datetime import timedelta
from typing import assert_type

from solid_objects import (
    Actor,
    AsyncMessageReference,
    AsyncRuntime,
    MessageReference,
    Runtime,
    query,
)


class AttrMailer(Actor):
    sent: int = 0

    def deliver(self, to: str, *, template: str = "welcome") -> None:
        self.sent += len(to) + len(template)

    @query
    def count(self) -> int:
        return self.sent


class AttrCart(Actor):
    items: list[str] = []

    def add(self, sku: str, qty: int = 1) -> int:
        self.items.extend([sku] * qty)
        return len(self.items)

    async def add_later(self, sku: str) -> int:
        self.items.append(sku)
        return len(self.items)

    def remind(self, note: str) -> None:
        self.items.append(note)

    def clear(self) -> None:
        self.items = []

    @query
    def size(self) -> int:
        return len(self.items)

    def on_activate(self) -> None:
        pass

    def _helper(self) -> None:
        pass

    # --- staged from inside a turn: accepted ------------------------------------------

    def checkout(self) -> None:
        self.send_to(AttrMailer, "m").deliver(to="a@example.com")
        self.send_to(AttrMailer, "m", delay=5).deliver("a@example.com", template="x")
        self.send_to(AttrMailer, "m", priority=5).deliver(to="a@example.com")
        self.schedule(delay=timedelta(days=1)).remind(note="come back")
        self.schedule(every=60, key="k").clear()
        self.schedule(cron="0 9 * * MON", timezone="Europe/Paris").remind("weekly")
        assert_type(self.send_to(AttrMailer, "m").deliver(to="a"), None)

    # --- staged from inside a turn: rejected -------------------------------------------

    def mistakes(self) -> None:
        self.send_to(AttrMailer, "m").delivr(to="a")  # type: ignore[attr-defined]
        self.send_to(AttrMailer, "m").deliver(to=1)  # type: ignore[arg-type]
        self.send_to(AttrMailer, "m").deliver(too="a")  # type: ignore[call-arg]
        self.send_to(AttrMailer, "m").count()  # type: ignore[attr-defined]
        self.schedule(delay=5).remnd()  # type: ignore[attr-defined]
        self.schedule(delay=5).remind(note=3)  # type: ignore[arg-type]
        self.schedule(delay=5).remind()  # type: ignore[call-arg]
        self.schedule(delay=5).size()  # type: ignore[attr-defined]
        self.schedule(delay=5).items()  # type: ignore[attr-defined]


class AttrBase(Actor):
    hits: int = 0

    def hit(self) -> int:
        self.hits += 1
        return self.hits


class AttrDerived(AttrBase):
    pass


# --- accepted, with the right types ------------------------------------------------------


def sync_refs(runtime: Runtime) -> None:
    ref = runtime.ref(AttrCart, "c")
    assert_type(ref.add(sku="x"), int)
    assert_type(ref.add("x", 2), int)
    assert_type(ref.add_later(sku="x"), int)  # an async def gives its awaited result
    assert_type(ref.clear(), None)
    assert_type(ref.size(), int)
    assert_type(ref.add.send(sku="x"), MessageReference[int])
    assert_type(ref.add.send(sku="x").wait(timeout=10), int)
    assert_type(ref.add_later.send(sku="x").result(), int)
    assert_type(ref.add.with_options(idempotency_key="k").send(sku="x"), MessageReference[int])
    assert_type(ref.add.with_options(timeout=5)(sku="x"), int)
    assert_type(
        ref.add.with_options(priority=9, coalesce_key="k").send(sku="x"), MessageReference[int]
    )
    assert_type(ref.with_options(timeout=5).add(sku="x"), int)
    assert_type(ref.size.with_options(authorization="u")(), int)
    assert_type(ref.actor_id, str)  # the ref's own attributes are untouched
    assert_type(runtime.ref(AttrDerived, "d").hit(), int)  # inherited operations


async def async_refs(runtime: AsyncRuntime) -> None:
    ref = runtime.ref(AttrCart, "c")
    assert_type(await ref.add(sku="x"), int)
    assert_type(await ref.add_later(sku="x"), int)
    assert_type(await ref.size(), int)
    assert_type(await ref.add.send(sku="x"), AsyncMessageReference[int])
    assert_type(await (await ref.add.send(sku="x")).wait(), int)
    assert_type(await ref.add.with_options(idempotency_key="k")(sku="x"), int)
    assert_type(await ref.add.with_options(priority=1)(sku="x"), int)
    assert_type(await ref.with_options(timeout=5).add(sku="x"), int)


# --- rejected ------------------------------------------------------------------------------


def sync_rejections(runtime: Runtime) -> None:
    ref = runtime.ref(AttrCart, "c")
    ref.add(skuu="x")  # type: ignore[call-arg]
    ref.add(sku=1)  # type: ignore[arg-type]
    ref.add()  # type: ignore[call-arg]
    ref.addd()  # type: ignore[attr-defined]
    ref.add.send(skuu="x")  # type: ignore[call-arg]
    ref.add.with_options(idempotency_key="k").send(sku=1)  # type: ignore[arg-type]
    ref.size.send()  # type: ignore[attr-defined]
    ref._helper()  # type: ignore[attr-defined]
    print(ref.items)  # type: ignore[attr-defined]
    ref.on_activate()  # type: ignore[attr-defined]
    ref.emit("x")  # type: ignore[attr-defined]
    wrong: str = ref.add(sku="x")  # type: ignore[assignment]  # pyright: ignore[reportAny]
    also_wrong: str = ref.add.send(sku="x").wait()  # type: ignore[assignment]  # pyright: ignore[reportAny]
    print(wrong, also_wrong)


async def async_rejections(runtime: AsyncRuntime) -> None:
    ref = runtime.ref(AttrCart, "c")
    await ref.add(skuu="x")  # type: ignore[call-arg]
    await ref.addd()  # type: ignore[attr-defined]
    await ref.add.send(sku=1)  # type: ignore[arg-type]
    await ref.size.send()  # type: ignore[attr-defined]
    wrong: str = await ref.add(sku="x")  # type: ignore[assignment]  # pyright: ignore[reportAny]
    also_wrong: str = await (await ref.add.send(sku="x")).wait()  # type: ignore[assignment]  # pyright: ignore[reportAny]
    ref.add(sku="x")  # type: ignore[unused-coroutine]
    print(wrong, also_wrong)


# Not checkable statically (each fails only at run time): a ref whose class is only
# known at run time (runtime.ref(cls, ...) with cls: type[Actor]) stays Any; an
# overloaded operation stays Any; self.cancel_schedule("name") takes a string.
