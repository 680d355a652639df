"""Named crash points: a seam for fault-injection tests, free when unused.

The engine calls :func:`point` before and after each step of a call's life.
Normally that is one global lookup of ``None``. A test installs a hook with
:func:`inject`; the hook may raise (the thread stops there, as if its process
had been killed: nothing after the point runs, no cleanup) or block (a stall,
as under SIGSTOP), and the test then checks the contract with a fresh runtime.

Points (each also listed in :data:`POINTS`):

- ``enqueue.body``: inside the enqueue transaction, after its writes (before commit);
  for an enqueue that is one autocommit statement (PostgreSQL), just before it: a crash
  at either writes nothing
- ``enqueue.committed``: the enqueue committed; before it is routed to a worker
- ``claim.committed``: a claim transaction committed; before the activation runs
- ``turn.executed``: the operation ran; before its commit transaction
- ``commit.body``: inside the commit transaction, after the turns' writes; for a lone
  turn whose commit is one autocommit statement (PostgreSQL), just before it
- ``commit.committed``: the turn committed; before the caller is told
- ``reply.body``: inside the commit of a request's turn, after its answer to the asker
  was written (before commit)
- ``promote.committed``: sent messages were moved into their mailboxes
- ``effect.claimed``: an effect was claimed; before its handler runs
- ``effect.handled``: the handler returned; before its outcome is recorded
- ``effect.recorded``: the outcome and its callback message committed
- ``reminder.fired``: a reminder firing committed; before its message is delivered
- ``lease.renew``: before the periodic lease renewal
- ``shutdown.release``: before a stopping process releases its leases
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

POINTS = (
    "enqueue.body",
    "enqueue.committed",
    "claim.committed",
    "turn.executed",
    "commit.body",
    "commit.committed",
    "reply.body",
    "promote.committed",
    "effect.claimed",
    "effect.handled",
    "effect.recorded",
    "reminder.fired",
    "lease.renew",
    "shutdown.release",
)

_hook: Callable[[str], None] | None = None


class SimulatedCrash(BaseException):
    """Raised by a crash hook: derives from BaseException so nothing "handles" it."""


def point(name: str) -> None:
    """Mark a step of the engine; calls the installed hook, if any."""
    if _hook is not None:
        _hook(name)


@contextmanager
def inject(hook: Callable[[str], None]) -> Iterator[None]:
    """Install ``hook`` for the duration of the block (tests only)."""
    global _hook
    previous, _hook = _hook, hook
    try:
        yield
    finally:
        _hook = previous
