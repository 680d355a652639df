"""``with_options(connection=django.db.connection).send(...)``: the outbox on Django's connection.

The enqueue writes the message on the DB-API connection under Django's
``connection`` (``connections[alias]``), inside ``transaction.atomic(using=alias)``:
within the application's ``atomic()`` block that is a savepoint of its transaction,
so the message commits or rolls back with the application's rows; outside one
(autocommit) it is a transaction of its own, committed at once. The workers are
woken by ``transaction.on_commit``; if that wake-up is lost (the process dies right
after the commit) the message is already durable and the poller finds it.

Refs of the runtime built from ``DATABASES`` need no ``connection=`` inside an
``atomic()`` block on its database (:func:`atomic_blocks`): a ``send()`` joins that
block's transaction the same way, and a call, which waits for a result no worker can
produce before the commit, raises :class:`CallInsideAtomicBlock` instead of
committing its message apart from the block.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ...engine import external
from ...errors import ConfigurationError, SyncInsideTransaction

#: Django's ``connection.vendor`` -> the library's database family.
_FAMILIES = {"sqlite": "sqlite", "postgresql": "postgresql", "mysql": "mysql"}


def join(target: Any) -> external.Joined | None:
    """The application transaction of Django's ``target`` connection, or None for others."""
    from django.db import connections, transaction
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.utils.connection import ConnectionProxy

    if isinstance(target, ConnectionProxy):  # django.db.connection: this thread's default
        target = connections[target.alias]
    if not isinstance(target, BaseDatabaseWrapper):
        return None
    alias = target.alias
    if connections[alias] is not target:
        # Django's connections are per thread (and per asyncio task): another thread's
        # connection is another transaction, which this thread must not write in.
        raise ConfigurationError(
            f"this Django connection ({alias!r}) belongs to another thread: send from the "
            "thread that runs the transaction.atomic() block (the sync face; in an async "
            "view, inside sync_to_async)"
        )
    family = _FAMILIES.get(target.vendor)
    if family is None:
        raise ConfigurationError(
            f"Django's {target.vendor} connection cannot carry messages; the runtime supports "
            "sqlite, postgresql and mysql"
        )

    @contextmanager
    def joined() -> Iterator[tuple[Any, Any]]:
        with transaction.atomic(using=alias):
            target.ensure_connection()
            # The driver's own connection, under Django's cursor wrappers: the library
            # renders its statements in the driver's parameter style.
            raw = target.connection
            yield raw, raw

    def after_commit(callback: Callable[[], None]) -> None:
        transaction.on_commit(callback, using=alias)

    return external.Joined(family, joined, after_commit)


class CallInsideAtomicBlock(SyncInsideTransaction):
    """A call (which waits for its result) inside ``transaction.atomic()`` on the
    runtime's database: its message could only commit apart from the block (and run
    even if the block rolls back), or wait for a commit that comes after the call."""


def in_atomic_block(target: Any) -> bool:
    """Whether Django's connection is inside an ``atomic()`` block the application
    opened: the blocks a ``TestCase`` wraps each test in do not count (as for Django's
    own ``durable`` check), so a test behaves as the view it tests."""
    return bool(target.in_atomic_block) and any(
        not getattr(block, "_from_testcase", False) for block in target.atomic_blocks
    )


def atomic_blocks(alias: str) -> Callable[[str, str], Any]:
    """The ``Runtime.enlist_sends`` finder for Django's ``alias``: inside an atomic block
    a send joins its transaction (this thread's connection), a call is refused."""

    def finder(kind: str, what: str) -> Any:
        from django.db import connections

        target = connections[alias]
        if not in_atomic_block(target):
            return None
        if kind == "send":
            return target
        raise CallInsideAtomicBlock(
            f"{what} inside transaction.atomic() on DATABASES[{alias!r}]: a call waits for "
            "its result, which no worker can produce before this transaction commits, and "
            "its message would commit apart from it (and run even if it rolls back). "
            "Send instead, in the transaction: .send(...) inside atomic() joins it (as "
            ".with_options(connection=django.db.connection).send(...) does), or "
            "send_on_commit(ref.operation, ...) sends after the commit; or call after the "
            "atomic() block (with ATOMIC_REQUESTS, mark the view "
            "@transaction.non_atomic_requests)"
        )

    return finder


def install() -> None:
    """Register :func:`join` so ``connection=`` accepts Django's connection."""
    external.register("or Django's connection (django.db.connection)", join)
