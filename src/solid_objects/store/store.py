"""The store itself: transactions, the wake-up channel, and the parts it holds.

The engine never writes SQL; it calls these methods inside ``write()`` or
``read()`` blocks. Each method documents the invariant its statements keep.
The statements of other concerns are parts the store holds, one module each: the
mailbox (``store.mailbox``), a turn's fenced commit (``store.turns``), the outbox,
claims and leases (``store.leases``), admin, control, processes and retention
(``part.py``).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

from sqlalchemy import Engine, Table
from sqlalchemy.exc import DBAPIError

from .. import deadline
from ..errors import DatabaseError
from . import application, coalescing, schema
from .admin import AdminStatements
from .admin_activity import ActivityStatements
from .broadcasts import BroadcastStatements
from .control import ControlStatements
from .dead_letters import DeadLetterStatements
from .dialect import Dialect, Tx, dialect_for
from .effect_limits import EffectLimitStatements
from .idle import IdleStatements
from .journal import JournalStatements
from .leases import LeaseStatements
from .limits import LimitStatements
from .mailbox import MailboxStatements
from .notices import KEY_NAME, NoticeKey
from .outbox import OutboxStatements
from .peers import PeerStatements
from .processes import ProcessStatements
from .projections import ProjectionStatements
from .promotion import PromotionStatements
from .replica import ReplicaReads
from .replies import ReplyStatements
from .retention import RetentionStatements
from .rows import (
    MSG_COLS,
    ActorStatus,
    Claimed,
    Committed,
    Due,
    Enqueued,
    Lease,
    MessageRow,
    ReadyActor,
    message_row,
    new_id,
    new_owner,
    new_token,
    scheduled_message,
)
from .tracebacks import TracebackStatements
from .turns import TurnStatements
from .writer import EnqueueBatcher, GroupWriter

#: The row types and id helpers of ``rows.py`` that the engine and admin import from here.
__all__ = [
    "TERMINAL",
    "ActorStatus",
    "Claimed",
    "Committed",
    "Due",
    "Enqueued",
    "Lease",
    "MessageRow",
    "ReadyActor",
    "Store",
    "new_id",
    "new_owner",
    "new_token",
]

T = TypeVar("T")

log = logging.getLogger("solid_objects.store")

#: How many times a transaction the server rolled back for a conflict is run again: a
#: hot identity under SERIALIZABLE (CockroachDB, YugabyteDB) or Galera's multi-writer
#: certification loses many in a row (39 of 200 calls failed after 3 re-runs).
_CONFLICT_RETRIES = 30
#: The backoff before re-run ``n`` is drawn uniformly from 0 to ``min(cap, base * 2**n)``
#: ("full jitter"), so that the losers of one conflict do not meet again in step.
_BACKOFF_BASE = 0.002
_BACKOFF_CAP = 0.2

TERMINAL = frozenset({"completed", "rejected", "dead", "destroyed", "cancelled"})


def backoff(attempt: int) -> float:
    """The jittered wait before re-running a transaction for the ``attempt``-th time (0 first)."""
    return random.uniform(0.0, min(_BACKOFF_CAP, _BACKOFF_BASE * 2**attempt))


class Store:
    """The database side of Solid Objects, for one engine and table prefix.

    The core is here: transactions and the wake-up channel. Each other
    concern's statements are a part it holds (``store.mailbox``, ``store.turns``,
    ``store.outbox``, ...), one module each (``store/part.py``).
    """

    def __init__(self, engine: Engine, *, prefix: str = "solid_", options: dict[str, Any]) -> None:
        self.engine = engine
        self.prefix = prefix
        self.dialect: Dialect = dialect_for(engine)
        self.dialect.configure(engine, options)
        self.options = options
        self._sql: dict[str, str] = {}
        #: Where session marks are held when not on ``engine``: the ``listen_url``
        #: engine, which reaches the server directly (``store.sessions``).
        self.session_engine: Engine | None = None
        #: Where reads that tolerate staleness go (``replica_url``); None without one.
        self.replica: ReplicaReads | None = None
        self._channel: str | None = None
        self._identity: str | None = None
        #: Set when wake-ups go through a broker outside the database (Redis): called
        #: with each ``notify`` payload once its transaction has committed.
        self.publish: Callable[[str], None] | None = None
        #: Whether ``publish`` may carry outcomes (results), not only their ids: set for
        #: datagrams that stay on this host (``engine/peers.py``).
        self.publish_outcomes = False
        self._pending = threading.local()
        self._writer = (
            GroupWriter(engine, self.sql, self.dialect.begin_sql)
            if self.dialect.group_commit
            else None
        )
        self._batcher = EnqueueBatcher(
            self.transact, statement=self.run_statement if self.dialect.writable_cte else None
        )
        #: Projection tables: their DDL and the upsert a turn's commit runs.
        self.projections = ProjectionStatements(engine, self.dialect, prefix)
        #: The per-turn journal of classes that ask for one.
        self.journal = JournalStatements(prefix)
        #: The MAC key of the wake-up payloads that carry data (``store/notices.py``).
        self.notice_key = NoticeKey(self._read_notice_key)
        self.mailbox = MailboxStatements(self)
        self.turns = TurnStatements(self)
        self.outbox = OutboxStatements(self)
        self.effect_limits = EffectLimitStatements(self)
        self.replies = ReplyStatements(self)
        self.promotion = PromotionStatements(self)
        self.broadcasts = BroadcastStatements(self)
        self.processes = ProcessStatements(self)
        self.peers = PeerStatements(self)
        self.control = ControlStatements(self)
        self.idle = IdleStatements(self)
        self.retention = RetentionStatements(self)
        self.tracebacks = TracebackStatements(self)
        self.admin = AdminStatements(self)
        self.dead_letters = DeadLetterStatements(self)
        self.activity = ActivityStatements(self)
        self.limits = LimitStatements(self)
        self.leases = LeaseStatements(self)

    @functools.cached_property
    def actors_table(self) -> Table:
        """The actors table for the application's own reads (``schema.queryable_actors``)."""
        return schema.queryable_actors(self.prefix)

    # --- plumbing ---------------------------------------------------------------------

    def sql(self, template: str) -> str:
        """The driver-ready SQL of a template using ``{actors}``, ``{messages}``, ``{now}``."""
        rendered = self._sql.get(template)
        if rendered is None:
            rendered = self.dialect.render(
                template.format(
                    actors=f"{self.prefix}actors",
                    messages=f"{self.prefix}messages",
                    effects=f"{self.prefix}effects",
                    reminders=f"{self.prefix}reminders",
                    broadcasts=f"{self.prefix}broadcasts",
                    now=self.dialect.now_ms,
                    for_update=self.dialect.for_update,
                )
            )
            self._sql[template] = rendered
        return rendered

    def transact(self, body: Callable[[Tx], T], *, isolated: bool = True) -> T:
        """Run ``body(tx)`` in a read-write transaction; return once it is committed.

        On SQLite the body joins the next group commit (see ``store.writer``);
        elsewhere it runs in its own transaction on this thread. ``isolated=False``
        is for bodies that raise only before writing anything: on SQLite they skip
        the savepoint that would otherwise contain them.
        """
        if self.publish is None:
            return self._commit(body, isolated)
        run, publish = self._publishing(body)
        result = self._commit(run, isolated)
        publish()
        return result

    def run_statement(self, body: Callable[[Tx], T]) -> T:
        """Run ``body``, one writing statement, as its own transaction (autocommit): one
        round trip where a transaction costs three (PostgreSQL, ``writable_cte``). Only
        for bodies whose one write is atomic alone; reads after it see it committed."""
        if self.publish is None:
            return self._retrying(body, self.dialect.statement)
        run, publish = self._publishing(body)
        result = self._retrying(run, self.dialect.statement)
        publish()
        return result

    def _commit(self, body: Callable[[Tx], T], isolated: bool) -> T:
        if self._writer is not None:
            return self._writer.submit(body, isolated=isolated).result()
        return self._retrying(body, self.dialect.write)

    def _retrying(
        self,
        body: Callable[[Tx], T],
        transaction: Callable[[Engine, Any], AbstractContextManager[Tx]],
    ) -> T:
        for attempt in range(_CONFLICT_RETRIES + 1):
            try:
                with transaction(self.engine, self.sql) as tx:
                    return body(tx)
            except DatabaseError as exc:
                # Bodies are functions of the transaction alone, so one the server rolled
                # back for a conflict (``Dialect.rolled_back``, even at COMMIT), or one
                # whose connection died before COMMIT was sent, can simply run again. A
                # COMMIT of unknown outcome is never re-run (``commit_unknown``).
                retry = not exc.commit_unknown and (
                    self.dialect.rolled_back(exc.orig) or exc.disconnect
                )
                # A call's deadline that passed ends the retries.
                if attempt == _CONFLICT_RETRIES or not retry or deadline.expired():
                    raise
                log.debug("transaction %d rolled back (%r); running it again", attempt + 1, exc)
                time.sleep(backoff(attempt))
        raise AssertionError("unreachable")

    def unavailable(self, error: BaseException) -> bool:
        """Whether a failed transaction means the database takes no writes now (see
        ``Dialect.is_unavailable``) rather than that it refused this transaction's work."""
        if isinstance(error, DatabaseError):
            return error.disconnect or self.dialect.is_unavailable(error.orig)
        return self.dialect.is_unavailable(getattr(error, "orig", None))

    def transact_future(
        self,
        body: Callable[[Tx], T],
        *,
        isolated: bool = True,
        key: Any = None,
        one_statement: Callable[[Tx], T | None] | None = None,
    ) -> Future[T]:
        """Like :meth:`transact`, without waiting: the future completes after the commit.

        Done callbacks may run on the group-commit thread; they must be quick. On the
        servers (no group-commit thread) the body runs now, in this thread; bodies given
        a ``key`` (an enqueue: ``(actor_type, actor_id)``, the actor row it locks) that
        arrive while another keyed one is in flight share the next transaction, run in
        the order of their keys (``writer.EnqueueBatcher``). ``one_statement``: the same
        work as one statement, run as its own transaction when the body runs alone (it
        returns None when it wrote nothing; the body then runs in a transaction).
        """
        if key is not None and self._writer is None:
            return self._batcher.submit(key, body, one_statement)
        if self._writer is not None:
            if self.publish is None:
                return self._writer.submit(body, isolated=isolated)
            run, publish = self._publishing(body)
            submitted = self._writer.submit(run, isolated=isolated)
            submitted.add_done_callback(
                lambda f: None if f.cancelled() or f.exception() else publish()
            )
            return submitted
        future: Future[T] = Future()
        try:
            future.set_result(self.transact(body))
        except Exception as exc:
            future.set_exception(exc)
        return future

    def _publishing(self, body: Callable[[Tx], T]) -> tuple[Callable[[Tx], T], Callable[[], None]]:
        """``body`` collecting its ``notify`` payloads, and what publishes them after commit."""
        payloads: list[str] = []
        local = self._pending

        def run(tx: Tx) -> T:
            payloads.clear()  # a body run again after a deadlock starts afresh
            local.payloads = payloads
            try:
                return body(tx)
            finally:
                local.payloads = None

        def publish() -> None:
            if self.publish is not None:
                for payload in dict.fromkeys(payloads):
                    self.publish(payload)

        return run, publish

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()

    @contextmanager
    def read(self) -> Iterator[Tx]:
        """Reads of committed data (autocommit statements on SQLite)."""
        with self.dialect.read(self.engine, self.sql) as tx:
            yield tx

    def attach_replica(self, engine: Engine, max_lag: float) -> None:
        """Send stale-tolerant reads to ``engine`` while it is within ``max_lag`` s."""
        dialect = dialect_for(engine)  # its own: a replica is reached directly, never pooled
        dialect.configure(engine, {**self.options, "pooler": None})
        self.replica = ReplicaReads(
            engine, self.engine, dialect, self.sql, self.read, max_lag=max_lag
        )

    def stale_read(self) -> AbstractContextManager[Tx]:
        """A read that may be up to ``replica_max_lag`` seconds behind (the replica's)."""
        return self.read() if self.replica is None else self.replica.read()

    def install(self) -> int:
        retries = self.dialect.install_retries
        for attempt in range(retries + 1):
            try:
                with self.dialect.install_transaction(self.engine) as conn:
                    version = schema.install(conn, self.dialect, self.prefix)
                self.notice_key.load()  # before the first enqueue needs it
                self.load_channel()
                return version
            except DBAPIError as exc:
                # No install lock on this engine: another process's install got there
                # first; run again, and find its work (install is idempotent).
                if attempt == retries or not self.dialect.lost_install_race(exc.orig):
                    raise
                log.info("install lost a race to another (%r); running it again", exc)
                time.sleep(backoff(attempt) + 0.05)
        raise AssertionError("unreachable")

    def install_sql(self) -> str:
        return schema.install_sql(self.engine.dialect, self.prefix)

    def write_blocked(self, wait: float) -> str | None:
        """Why no write transaction could start within ``wait`` seconds (SQLite), or None."""
        return self.dialect.write_blocked(self.engine, wait)

    def check_installed(self) -> None:
        with self.engine.connect() as conn:
            schema.check_installed(conn, self.prefix)
        self.notice_key.load()
        self.load_channel()

    def load_channel(self) -> None:
        """Read :attr:`channel` now, outside any transaction: the first enqueue would
        otherwise read it from a second connection while its own transaction holds
        one, and a transaction pooler with every server session busy never gives it."""
        if self._channel is None:
            self._channel = self.channel

    def now(self, tx: Tx) -> int:
        return int(tx.scalar("SELECT {now}"))

    @property
    def channel(self) -> str:
        """The wake-up channel of these tables (PostgreSQL NOTIFY, Redis Pub/Sub).

        Notifications are per database, not per schema, and a Redis server may serve
        several databases: the channel names the schema (or MySQL database, or SQLite
        file) too, so applications elsewhere are not woken.
        """
        if self._channel is None:
            with self.read() as tx:
                where = str(tx.scalar(self.dialect.scope_sql))
            digest = hashlib.sha1(where.encode()).hexdigest()[:10]
            self._channel = f"{self.prefix}wake_{digest}"
        return self._channel

    def _read_notice_key(self) -> str | None:
        with self.read() as tx:
            value = tx.scalar(f"SELECT value FROM {self.prefix}secrets WHERE name = '{KEY_NAME}'")
        return None if value is None else str(value)

    def notify(self, tx: Tx, payload: str) -> None:
        """Tell other processes, when this transaction commits (PostgreSQL, or Redis).

        ``w``: there is new work; ``d:<message id>``: that message finished. With a
        ``publish`` hook the payload is published after the commit instead.
        """
        if self.publish is not None:
            pending: list[str] | None = getattr(self._pending, "payloads", None)
            if pending is not None:
                pending.append(payload)
        elif self.dialect.notify_sql is not None:
            tx.row(self.dialect.notify_sql, {"channel": self.channel, "payload": payload})

    # --- enqueue ----------------------------------------------------------------------

    def enqueue_on(
        self, dialect_name: str, dbapi_connection: Any, driver_connection: Any, **fields: Any
    ) -> Enqueued:
        """Enqueue in the application's own transaction on its DB-API connection.

        Nothing is committed. See :func:`~solid_objects.store.application.enqueue_on`.
        """
        return application.enqueue_on(
            self, dialect_name, dbapi_connection, driver_connection, **fields
        )

    def identity(self, *, refresh: bool = False) -> str:
        """Which server, database and schema the runtime's connections reach (cached).

        ``refresh`` reads it again: after a failover (Patroni, a multi-host URL) the
        runtime's connections reach the new primary, whose start time differs.
        """
        if self._identity is None or refresh:
            self._identity = application.identity(self)
        return self._identity

    def head_message(self, tx: Tx, pk: int, seq: int) -> MessageRow | None:
        row = tx.row(
            f"SELECT {MSG_COLS} FROM {{messages}} WHERE actor_pk = :pk AND seq = :seq",
            {"pk": pk, "seq": seq},
        )
        return None if row is None else message_row(row)

    # --- reads for callers --------------------------------------------------------------

    def message(self, tx: Tx, message_id: str) -> MessageRow | None:
        row = tx.row(f"SELECT {MSG_COLS} FROM {{messages}} WHERE id = :id", {"id": message_id})
        return None if row is None else message_row(row)

    def actor_state(self, tx: Tx, actor_type: str, actor_id: str) -> tuple[str | None, int] | None:
        row = tx.row(
            "SELECT state, state_version FROM {actors} WHERE actor_type = :t AND actor_id = :i",
            {"t": actor_type, "i": actor_id},
        )
        return None if row is None else (row[0], int(row[1]))

    def actor_status(self, tx: Tx, pk: int) -> ActorStatus | None:
        row = tx.row(
            "SELECT done_seq, next_seq, attempt, ready_at, lease_owner, lease_expires_at, "
            "paused, {now}, state_version FROM {actors} WHERE pk = :pk",
            {"pk": pk},
        )
        if row is None:
            return None
        return ActorStatus(
            done_seq=int(row[0]),
            next_seq=int(row[1]),
            attempt=int(row[2]),
            ready_at=row[3],
            lease_owner=row[4],
            lease_expires_at=row[5],
            paused=bool(row[6]),
            now=int(row[7]),
            state_version=int(row[8]),
        )

    def next_due(self, tx: Tx) -> Due:
        """Milliseconds until each kind of time-triggered work is due (<= 0: due now)."""
        row = tx.row(
            "SELECT (SELECT MIN(ready_at) FROM {actors} WHERE ready_at > {now}), "
            "(SELECT MIN(available_at) FROM {messages} WHERE status = 'scheduled'), "
            "(SELECT MIN(due_at) FROM {reminders} WHERE paused = 0), "
            "(SELECT MIN(available_at) FROM {effects} WHERE status IN ('pending', 'running')), "
            "{now}"
        )
        now = int(row[4])
        return Due(*(None if v is None else int(v) - now for v in row[:4]))

    def lock_incarnation(self, tx: Tx, pk: int) -> bool:
        """Whether incarnation ``pk`` still exists; its row stays locked until the commit,
        so a destroy cannot end it before this transaction has written to it."""
        found = tx.scalar("SELECT pk FROM {actors} WHERE pk = :pk{for_update}", {"pk": pk})
        return found is not None

    def insert_destroyed(
        self,
        tx: Tx,
        *,
        message_id: str,
        actor_pk: int,
        actor_type: str,
        actor_id: str,
        operation: str,
        arguments: str,
        idempotency_key: str,
    ) -> MessageRow:
        """Record a message to an incarnation that no longer exists as ``destroyed`` (what
        :meth:`destroy` made of its other messages), once per idempotency key."""
        existing = self.mailbox.keyed_message(tx, actor_pk, idempotency_key)
        if existing is not None:
            return existing
        now = self.now(tx)
        message = scheduled_message(
            message_id, actor_pk, actor_type, actor_id, operation, arguments, idempotency_key, now
        )
        message.status = "destroyed"
        tx.run(
            "INSERT INTO {messages} (id, actor_pk, actor_type, actor_id, seq, operation, "
            "arguments, idempotency_key, status, available_at, attempts, created_at, "
            "completed_at) VALUES (:id, :pk, :t, :i, NULL, :op, :args, :key, 'destroyed', "
            ":now, 0, :now, :now)",
            {
                "id": message_id,
                "pk": actor_pk,
                "t": actor_type,
                "i": actor_id,
                "op": operation,
                "args": arguments,
                "key": idempotency_key,
                "now": now,
            },
        )
        return message

    def destroy(self, tx: Tx, actor_type: str, actor_id: str, *, observed: bool = False) -> bool:
        """End an incarnation: pending messages become ``destroyed``; the row goes.

        ``observed`` (the class declares observables): its subscribers are told, with a
        broadcast row that ends the incarnation.
        """
        pk = tx.scalar(
            "SELECT pk FROM {actors} WHERE actor_type = :t AND actor_id = :i{for_update}",
            {"t": actor_type, "i": actor_id},
        )
        if pk is None:
            return False
        self.replies.reply_destroyed(tx, int(pk), None)
        tx.run(
            "UPDATE {messages} SET status = 'destroyed', completed_at = {now} "
            "WHERE actor_pk = :pk AND status IN ('scheduled', 'queued')",
            {"pk": pk},
        )
        coalescing.passed_at_destroy(tx, int(pk))
        if observed:
            self.broadcasts.broadcast_destroyed(tx, int(pk), actor_type, actor_id)
        tx.run("DELETE FROM {actors} WHERE pk = :pk", {"pk": pk})
        self.outbox.delete_reminders_of(tx, int(pk))
        self.projections.delete(tx, actor_type, [actor_id])
        return True
