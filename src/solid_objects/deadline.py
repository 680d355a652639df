"""The deadline of the call this thread is making, for the database work done on its behalf.

A call's ``timeout`` must bound the call, including the time its enqueue (or its
direct turn's commit) waits for a row lock that another transaction holds. The
caller sets its deadline here (:func:`bounded`); the store reads it
(:func:`remaining`) to bound each transaction's lock wait and to stop retrying
once the deadline passed. A ``ContextVar``, so the async face's executor threads
carry it too (``AsyncRuntime._run`` copies the caller's context).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

#: ``time.monotonic()`` by which the current call must return, if one is being made.
_deadline: ContextVar[float | None] = ContextVar("solid_objects_deadline", default=None)


@contextmanager
def bounded(deadline: float | None) -> Iterator[None]:
    """Database work inside this block is on behalf of a call due at ``deadline``."""
    token = _deadline.set(deadline)
    try:
        yield
    finally:
        _deadline.reset(token)


def current() -> float | None:
    """The deadline of the call this thread is making, or None."""
    return _deadline.get()


def remaining() -> float | None:
    """Seconds left before the current call's deadline (never negative), or None."""
    deadline = _deadline.get()
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def expired() -> bool:
    left = remaining()
    return left is not None and left <= 0.0
