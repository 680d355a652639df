# pyright: reportUnnecessaryTypeIgnoreComment=error, reportUnusedCallResult=false
"""Static typing contract of the typed call form (type-checked, never executed): on refs
(``ref.call(Counter.add, ...)``) and on staged messages and reminders
(``self.send_to(Other, id).call(Other.add, ...)``, ``self.schedule(...).call(...)``).

    .venv/bin/mypy --strict tests/typing
    .venv/bin/basedpyright tests/typing

Every ``assert_type`` line must hold under both checkers. Every line in the
"rejected" sections carries one ignore comment per checker, and each must stay
*necessary*: mypy runs with ``--warn-unused-ignores`` (part of ``--strict``)
and basedpyright with ``reportUnnecessaryTypeIgnoreComment=error`` (set above),
so a line that stops being an error fails the check.

- ``# type: ignore[code]`` is read by mypy only: basedpyright leaves
  ``enableTypeIgnoreComments`` off by default. Because ``call``/``send`` are
  overloaded, mypy files every argument mistake under ``call-overload``.
- ``# pyright: ignore[rule, ...]`` is read by basedpyright only. It reports the
  overload failure (``reportCallIssue``) plus the underlying cause.

The file name does not match ``test_*.py``, so pytest never collects it;
``tests/test_typing.py`` runs both checkers on this folder.
"""

from __future__ import annotations

from typing import assert_type

from solid_objects import (
    Actor,
    AsyncMessageReference,
    AsyncRef,
    AsyncRuntime,
    MessageReference,
    Ref,
    Runtime,
    query,
)


class Counter(Actor):
    value: int = 0

    def add(self, n: int = 1) -> int:
        self.value += n
        return self.value

    async def add_later(self, n: int = 1) -> int:
        self.value += n
        return self.value

    def label(self, prefix: str, *, upper: bool = False) -> str:
        text = f"{prefix}{self.value}"
        return text.upper() if upper else text

    def reset(self) -> None:
        self.value = 0

    @query
    def current(self) -> int:
        return self.value


class Other(Actor):
    total: int = 0

    def add(self, n: int = 1) -> int:
        self.total += n
        return self.total


class Stager(Actor):
    """Staged messages and reminders in the typed form: ``.call(Cls.operation, ...)``."""

    count: int = 0

    def tick(self, by: int) -> None:
        self.count += by

    def stage(self) -> None:
        assert_type(self.send_to(Other, "o").call(Other.add, n=1), None)
        self.send_to(Other, "o", delay=5).call(Other.add)
        self.schedule(delay=60).call(Stager.tick, by=2)
        self.schedule(every=60, key="k").call(Stager.tick, 1)

    def mistakes(self) -> None:
        self.send_to(Other, "o").call(Other.add, n="x")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
        self.send_to(Other, "o").call(Other.add, m=1)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
        self.send_to(Other, "o").call(Counter.add, n=1)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
        self.schedule(delay=60).call(Stager.tick)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]
        self.schedule(delay=60).call(Stager.tick, by="x")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
        self.schedule(delay=60).call(Counter.reset)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


class Base(Actor):
    hits: int = 0

    def hit(self) -> int:
        self.hits += 1
        return self.hits


class Derived(Base):
    pass


# --- accepted, with the right types ------------------------------------------------------


def sync_refs(runtime: Runtime) -> None:
    ref = runtime.ref(Counter, "a")
    assert_type(ref, Ref[Counter])

    # call: the operation's return type; an async def gives its awaited type.
    assert_type(ref.call(Counter.add, n=1), int)
    assert_type(ref.call(Counter.add), int)
    assert_type(ref.call(Counter.add, 2), int)
    assert_type(ref.call(Counter.add_later, n=1), int)
    assert_type(ref.call(Counter.label, "x", upper=True), str)
    assert_type(ref.call(Counter.reset), None)
    assert_type(ref.call(Counter.current), int)

    # send: a MessageReference of the result type; wait() and result() give the result.
    message = ref.send(Counter.add, n=1)
    assert_type(message, MessageReference[int])
    assert_type(message.wait(), int)
    assert_type(message.wait(timeout=10), int)
    assert_type(message.result(), int)
    assert_type(ref.send(Counter.add_later, n=1), MessageReference[int])
    assert_type(ref.send(Counter.add_later, n=1).wait(), int)
    assert_type(ref.send(Counter.label, "x"), MessageReference[str])

    # with_options keeps the actor type.
    assert_type(ref.with_options(idempotency_key="k"), Ref[Counter])
    assert_type(ref.with_options(timeout=5).call(Counter.add, n=1), int)

    # An operation inherited from a base actor class is an operation of the subclass.
    derived = runtime.ref(Derived, "d")
    assert_type(derived, Ref[Derived])
    assert_type(derived.call(Base.hit), int)


async def async_refs(runtime: AsyncRuntime) -> None:
    ref = runtime.ref(Counter, "a")
    assert_type(ref, AsyncRef[Counter])

    assert_type(await ref.call(Counter.add, n=1), int)
    assert_type(await ref.call(Counter.add), int)
    assert_type(await ref.call(Counter.add_later, n=1), int)
    assert_type(await ref.call(Counter.label, "x", upper=True), str)
    assert_type(await ref.call(Counter.reset), None)
    assert_type(await ref.call(Counter.current), int)

    message = await ref.send(Counter.add, n=1)
    assert_type(message, AsyncMessageReference[int])
    assert_type(await message.wait(), int)
    assert_type(await message.wait(timeout=10), int)
    assert_type(await message.result(), int)
    assert_type(await ref.send(Counter.add_later, n=1), AsyncMessageReference[int])
    assert_type(await (await ref.send(Counter.add_later, n=1)).wait(), int)

    assert_type(ref.with_options(idempotency_key="k"), AsyncRef[Counter])
    assert_type(await ref.with_options(timeout=5).call(Counter.add, n=1), int)


# --- rejected ------------------------------------------------------------------------------


def sync_rejections(runtime: Runtime) -> None:
    ref = runtime.ref(Counter, "a")
    # Wrong argument type.
    ref.call(Counter.add, n="x")  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue, reportArgumentType]
    ref.send(Counter.add, n="x")  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue, reportArgumentType]
    ref.call(Counter.add_later, n="x")  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue, reportArgumentType]
    # Unknown keyword; missing required argument.
    ref.call(Counter.add, m=1)  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue]
    ref.send(Counter.add, m=1)  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue]
    ref.call(Counter.label)  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue]
    # A method of another actor class.
    ref.call(Other.add, n=1)  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue, reportArgumentType]
    ref.send(Other.add, n=1)  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue, reportArgumentType]
    # The int result assigned to a str.
    wrong: str = ref.call(Counter.add, n=1)  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    also_wrong: str = ref.send(Counter.add, n=1).wait()  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    print(wrong, also_wrong)


async def async_rejections(runtime: AsyncRuntime) -> None:
    ref = runtime.ref(Counter, "a")
    await ref.call(Counter.add, n="x")  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue, reportArgumentType]
    await ref.send(Counter.add, n="x")  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue, reportArgumentType]
    await ref.call(Counter.add, m=1)  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue]
    await ref.call(Other.add, n=1)  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue, reportArgumentType]
    await ref.send(Other.add, n=1)  # type: ignore[call-overload]  # pyright: ignore[reportCallIssue, reportArgumentType]
    # mypy solves R from the declared type (str) through the await, so it reports the
    # mismatch as a failed overload match rather than as an assignment error.
    wrong: str = await ref.call(Counter.add, n=1)  # type: ignore[call-overload]  # pyright: ignore[reportAssignmentType]
    also_wrong: str = await (await ref.send(Counter.add)).wait()  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
    print(wrong, also_wrong)


# Not checkable statically (each fails only at run time, with UnknownOperation):
# a @query passed to send() or to a staged .call(); a private method (Counter._x); a
# plain function whose first parameter is a Counter. The call form cannot tell these
# from operations.
