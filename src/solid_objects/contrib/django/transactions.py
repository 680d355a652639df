"""``with_options(connection=django.db.connection).send(...)``: the outbox on Django's connection.

The enqueue writes the message on the DB-API connection under Django's
``connection`` (``connections[alias]``), inside ``transaction.atomic(using=alias)``:
within the application's ``atomic()`` block that is a savepoint of its transaction,
so the message commits or rolls back with the application's rows; outside one
(autocommit) it is a transaction of its own, committed at once. The workers are
woken by ``transaction.on_commit``; if that wake-up is lost (the process dies right
after the commit) the message is already durable and the poller finds it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ...engine import external
from ...errors import ConfigurationError

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


def install() -> None:
    """Register :func:`join` so ``connection=`` accepts Django's connection."""
    external.register("or Django's connection (django.db.connection)", join)
