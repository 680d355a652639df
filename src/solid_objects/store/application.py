"""Enqueue inside the application's own transaction (the application-side outbox).

``ref.op.with_options(connection=conn).send(...)`` writes the message with the
statements of an ordinary enqueue, on the application's own DB-API connection,
inside its transaction: the message commits or rolls back with the application's
rows. The connection comes from a SQLAlchemy ``Connection`` or ``Session``, or from a
framework's connection (``solid_objects.contrib.django``); see
:mod:`solid_objects.engine.external`. The enqueue never claims the actor (a lease
taken in somebody else's transaction would be held until they commit); workers find
the message once it is committed.

On PostgreSQL and MySQL/MariaDB a new actor's row is first made apart, in a short
transaction of the library's own (:func:`create_apart`), so the application's
transaction only locks an existing row, by its unique key: no gap lock (MariaDB's
default REPEATABLE READ locks the gap a locking read of a missing row falls in,
holding every insert of another new actor there until the application commits), and
no uncommitted insert that another actor's ``send_to`` would wait for.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from .. import deadline
from ..errors import DatabaseError, ForeignDatabase
from .dialect import Tx

if TYPE_CHECKING:
    from .store import Enqueued, Store

_FAMILIES = {"mariadb": "mysql", "cockroachdb": "postgresql"}

log = logging.getLogger("solid_objects.store")

#: Seconds :func:`create_apart` may wait for a lock before leaving the row to the
#: application's transaction.
APART_LOCK_WAIT = 1.0


def _family(name: str) -> str:
    return _FAMILIES.get(name, name)


def enqueue_on(
    store: Store,
    dialect_name: str,
    dbapi_connection: Any,
    driver_connection: Any,
    *,
    message_id: str,
    actor_type: str,
    actor_id: str,
    operation: str,
    arguments: str,
    idempotency_key: str | None,
    delay_ms: int,
    traceparent: str | None,
    max_length: int | None = None,
    priority: int = 0,
    coalesce_key: str | None = None,
) -> Enqueued:
    """Enqueue on the application's DB-API connection, in its transaction; commit nothing.

    ``dialect_name`` is the application connection's database family (``sqlite``,
    ``postgresql``, ``mysql``). Refused with ForeignDatabase when the connection reaches
    another database (or schema) than the runtime's, checked before anything is
    written. The writes run under a savepoint, so a refused enqueue (an idempotency
    conflict) leaves the application's transaction as it was.
    """
    if _family(dialect_name) != _family(store.engine.dialect.name):
        raise ForeignDatabase(
            f"the connection is to a {dialect_name} database, the runtime's "
            f"to {store.engine.dialect.name}: enqueue on a connection to the runtime's database"
        )
    cursor = dbapi_connection.cursor()
    try:
        store.dialect.join(driver_connection, cursor)
        tx = Tx(cursor, store.sql, dbapi_connection)
        lock_error: Exception | None = None
        if store.dialect.join_lock_sql is not None:
            try:
                tx.run(store.dialect.join_lock_sql)
            except Exception as exc:  # "no such table" on another database: refused below
                lock_error = exc
        where = str(tx.scalar(store.dialect.identity_sql))
        if where != store.identity() and where != store.identity(refresh=True):
            raise ForeignDatabase(
                "the connection reaches another database or schema than the runtime's: "
                "the message would never be seen by its workers"
            )
        if lock_error is not None:
            raise lock_error
        actor_pk = create_apart(store, actor_type, actor_id)
        savepoint = tx.savepoint()
        try:
            enqueued = store.mailbox.enqueue(
                tx,
                message_id=message_id,
                actor_type=actor_type,
                actor_id=actor_id,
                operation=operation,
                arguments=arguments,
                idempotency_key=idempotency_key,
                delay_ms=delay_ms,
                claim_for=None,
                lease_ms=0,
                traceparent=traceparent,
                max_length=max_length,
                actor_pk=actor_pk,
                priority=priority,
                coalesce_key=coalesce_key,
            )
        except BaseException:
            savepoint.rollback()
            raise
        savepoint.release()
        return enqueued
    finally:
        cursor.close()


def create_apart(store: Store, actor_type: str, actor_id: str) -> int | None:
    """Make the actor's row, if missing, in a short transaction of the library's own;
    its pk, which the application's transaction locks it by (None: it makes the row).

    Only on the servers (SQLite has one writer: the application's transaction may hold
    it). The row may outlive a rolled-back application transaction, as an empty actor
    (no state, no message), which is what a cancelled delayed call leaves too; expiry
    (``state_ttl``) removes it. The wait for a lock is bounded (``APART_LOCK_WAIT``):
    when the application's own transaction holds what the insert needs, the enqueue
    inserts the row in that transaction instead.
    """
    if store.dialect.family not in ("postgresql", "mysql"):
        return None
    with store.read() as tx:
        pk = store.mailbox.actor_pk(tx, actor_type, actor_id)
    if pk is not None:
        return pk

    def insert(tx: Tx) -> int | None:
        store.mailbox.insert_actor(tx, actor_type, actor_id)
        return store.mailbox.actor_pk(tx, actor_type, actor_id)

    limit = time.monotonic() + APART_LOCK_WAIT
    current = deadline.current()
    try:
        with deadline.bounded(limit if current is None else min(limit, current)):
            return store.transact(insert)
    except DatabaseError as exc:
        log.debug(
            "the row of %s %r is made in the application's transaction: %r",
            actor_type,
            actor_id,
            exc,
        )
        return None


def identity(store: Store) -> str:
    """What :attr:`Dialect.identity_sql` answers on the runtime's own connections."""
    with store.read() as tx:
        return str(tx.scalar(store.dialect.identity_sql))
