"""The library's tables, and installing or upgrading them (each step in ``migrations.py``).

Timestamps are epoch milliseconds (BIGINT) read from the database clock, so
no column type differs in meaning between databases. Identifiers use a binary
collation on MySQL so ``Cart-1`` and ``cart-1`` are different actors.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Connection,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects import mysql, postgresql

from ..errors import SchemaNotInstalled, SchemaTooNew
from .admin_tables import define_admin_tables
from .dialect import Dialect
from .migrations import MIGRATIONS
from .notices import KEY_NAME, new_secret

#: The schema version this code reads and writes.
SCHEMA_VERSION = 19


def ident(length: int) -> String:
    """An identifier column: byte-exact (``utf8mb4_bin``) on MySQL/MariaDB, so ``Cart-1``
    and ``cart-1`` differ as they do everywhere else."""
    return String(length).with_variant(
        mysql.VARCHAR(length, charset="utf8mb4", collation="utf8mb4_bin"), "mysql", "mariadb"
    )


def big_text() -> Text:
    """A text column that holds more than 64 KiB on MySQL/MariaDB too (``LONGTEXT``)."""
    return Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


def state_type() -> Text:
    """An actor's state: ``jsonb`` on PostgreSQL and ``JSON`` on MySQL/MariaDB, so the
    application can index it and query it in SQL; text elsewhere (SQLite's JSON
    functions read text, CockroachDB's dialect keeps text)."""
    return (
        Text()
        .with_variant(postgresql.JSONB(), "postgresql")
        .with_variant(mysql.JSON(), "mysql", "mariadb")
    )


_PK = BigInteger().with_variant(Integer(), "sqlite")


def build_metadata(prefix: str) -> MetaData:
    md = MetaData(info={"prefix": prefix})
    Table(
        f"{prefix}schema",
        md,
        Column("name", String(64), primary_key=True),
        Column("version", Integer, nullable=False),
    )
    Table(
        f"{prefix}actors",
        md,
        Column("pk", _PK, primary_key=True, autoincrement=True),
        Column("actor_type", ident(128), nullable=False),
        Column("actor_id", ident(255), nullable=False),
        Column("state", state_type(), nullable=True),
        Column("state_version", Integer, nullable=False, server_default="1"),
        # Mailbox: queued messages are exactly seq done_seq+1 .. next_seq-1.
        Column("next_seq", BigInteger, nullable=False, server_default="1"),
        Column("done_seq", BigInteger, nullable=False, server_default="0"),
        # How many times the head message (done_seq+1) has been started.
        Column("attempt", Integer, nullable=False, server_default="0"),
        # When the actor next has claimable work (NULL: none); retry backoff pushes it.
        Column("ready_at", BigInteger, nullable=True),
        Column("lease_owner", String(64), nullable=True),
        Column("lease_token", String(64), nullable=True),
        Column("lease_generation", BigInteger, nullable=False, server_default="0"),
        Column("lease_expires_at", BigInteger, nullable=True),
        Column("paused", Integer, nullable=False, server_default="0"),
        Column("created_at", BigInteger, nullable=False),
        Column("updated_at", BigInteger, nullable=False),
        UniqueConstraint("actor_type", "actor_id", name=f"{prefix}actors_identity"),
        Index(f"{prefix}actors_ready", "ready_at"),
        Index(f"{prefix}actors_owner", "lease_owner"),
        # pk is the incarnation id: it must never be reused after a destroy.
        sqlite_autoincrement=True,
    )
    Table(
        f"{prefix}messages",
        md,
        Column("id", String(32), primary_key=True),
        Column("actor_pk", BigInteger, nullable=False),
        Column("actor_type", ident(128), nullable=False),
        Column("actor_id", ident(255), nullable=False),
        Column("seq", BigInteger, nullable=True),
        Column("operation", String(128), nullable=False),
        Column("arguments", big_text(), nullable=False),
        Column("idempotency_key", ident(255), nullable=True),
        # scheduled | queued | completed | rejected | dead | destroyed | cancelled | replaced
        Column("status", String(16), nullable=False),
        Column("available_at", BigInteger, nullable=False),
        Column("attempts", Integer, nullable=False, server_default="0"),
        Column("result", big_text(), nullable=True),
        Column("error", big_text(), nullable=True),
        Column("created_at", BigInteger, nullable=False),
        Column("completed_at", BigInteger, nullable=True),
        # W3C trace context of the sender's span (schema 4): tracing across processes.
        Column("traceparent", String(55), nullable=True),
        # A scheduled message's place among those due at the same time (schema 6): the
        # sending turn's seq and staging index, or the sending process's counter.
        # Promotion enters due messages by (available_at, send_order, id).
        Column("send_order", BigInteger, nullable=True),
        # Who sent it (schema 7), as JSON: another actor's type and id, a reminder's
        # operation and key, an effect's callback; NULL for a caller outside any actor.
        Column("sender", Text, nullable=True),
        # The formatted traceback of the last failed attempt (schema 12), bounded, redacted.
        Column("traceback", big_text(), nullable=True),
        # The claim rank it gives its actor as the head, 0 (plain) to 9 (schema 19,
        # store/priority.py); a queued one with a coalesce key may be replaced by a
        # later send with the same key, named in replaced_by (status ``replaced``).
        Column("priority", SmallInteger, nullable=False, server_default="0"),
        Column("coalesce_key", ident(255), nullable=True),
        Column("replaced_by", String(32), nullable=True),
        UniqueConstraint("actor_pk", "seq", name=f"{prefix}messages_mailbox"),
        # Partial where the database supports it, so the common message (no key,
        # never delayed, never dead) writes no entry into these indexes.
        Index(
            f"{prefix}messages_idempotency",
            "actor_pk",
            "idempotency_key",
            unique=True,
            sqlite_where=text("idempotency_key IS NOT NULL"),
            postgresql_where=text("idempotency_key IS NOT NULL"),
        ),
        Index(
            f"{prefix}messages_scheduled",
            "status",
            "available_at",
            sqlite_where=text("status = 'scheduled'"),
            postgresql_where=text("status = 'scheduled'"),
        ),
        Index(
            f"{prefix}messages_urgent",
            "priority",
            "status",
            sqlite_where=text("priority > 0"),
            postgresql_where=text("priority > 0"),
        ),
        Index(
            f"{prefix}messages_dead",
            "status",
            "completed_at",
            sqlite_where=text("status = 'dead'"),
            postgresql_where=text("status = 'dead'"),
        ),
        # On SQLite the table is clustered on its text id: no separate id index.
        sqlite_with_rowid=False,
    )
    Table(
        f"{prefix}effects",
        md,
        # The id is the effect's idempotency key (ctx.id): stable across retries.
        Column("id", String(32), primary_key=True),
        Column("actor_pk", BigInteger, nullable=False),
        Column("actor_type", ident(128), nullable=False),
        Column("actor_id", ident(255), nullable=False),
        Column("source_message_id", String(32), nullable=False),
        Column("name", ident(255), nullable=False),
        Column("arguments", big_text(), nullable=False),
        Column("on_success", String(128), nullable=True),
        Column("on_failure", String(128), nullable=True),
        # pending | running | done | dead
        Column("status", String(16), nullable=False),
        Column("attempts", Integer, nullable=False, server_default="0"),
        # pending: when it may run; running: when its claim expires and it may run again.
        Column("available_at", BigInteger, nullable=False),
        Column("claimed_by", String(64), nullable=True),
        Column("result", big_text(), nullable=True),
        Column("error", big_text(), nullable=True),
        Column("created_at", BigInteger, nullable=False),
        Column("completed_at", BigInteger, nullable=True),
        Column("traceparent", String(55), nullable=True),
        # The formatted traceback of the last failed attempt (schema 12), bounded, redacted.
        Column("traceback", big_text(), nullable=True),
        # When the current attempt was claimed (schema 18; NULL: never claimed since).
        Column("started_at", BigInteger, nullable=True),
        Index(f"{prefix}effects_actor", "actor_pk"),
        Index(
            f"{prefix}effects_due",
            "status",
            "available_at",
            sqlite_where=text("status IN ('pending', 'running')"),
            postgresql_where=text("status IN ('pending', 'running')"),
        ),
        sqlite_with_rowid=False,
    )
    Table(
        f"{prefix}reminders",
        md,
        Column("actor_pk", BigInteger, primary_key=True),
        Column("operation", String(128), primary_key=True),
        Column("rkey", ident(255), primary_key=True),
        Column("actor_type", ident(128), nullable=False),
        Column("actor_id", ident(255), nullable=False),
        Column("arguments", big_text(), nullable=False),
        Column("due_at", BigInteger, nullable=False),
        Column("every_ms", BigInteger, nullable=True),
        # A cron schedule instead of every_ms (schema 8): expression and IANA zone name.
        Column("cron", String(255), nullable=True),
        Column("cron_tz", String(64), nullable=True),
        # latest | all
        Column("missed", String(8), nullable=False),
        # Bumped by every reschedule and every firing: a firing only applies to the
        # occurrence it read, so a reschedule during a firing is never lost.
        Column("version", BigInteger, nullable=False),
        Column("created_at", BigInteger, nullable=False),
        Column("updated_at", BigInteger, nullable=False),
        # An operator paused it: it keeps its schedule but does not fire (schema 4).
        Column("paused", Integer, nullable=False, server_default="0"),
        Index(f"{prefix}reminders_due", "due_at"),
    )
    Table(
        f"{prefix}processes",
        md,
        # The lease owner every lease and effect claim of the process carries.
        Column("owner", String(64), primary_key=True),
        Column("host", String(255), nullable=False),
        Column("pid", BigInteger, nullable=False),
        Column("version", String(32), nullable=False),
        # JSON list of the actor types the process runs.
        Column("actor_types", big_text(), nullable=False),
        # JSON list of the effect names it runs handlers for (schema 10; NULL: none).
        Column("effect_names", big_text(), nullable=True),
        Column("started_at", BigInteger, nullable=False),
        Column("heartbeat_at", BigInteger, nullable=False),
        # Stale once the database clock passes this without a new heartbeat.
        Column("expires_at", BigInteger, nullable=False),
        Column("stopped_at", BigInteger, nullable=True),
        # drained (a clean stop) | stale (found dead) | released (by an operator) |
        # gone (its database session ended, or its pid is gone)
        Column("stop_reason", String(16), nullable=True),
        # How a peer proves the process gone before its heartbeat expires (schema 13):
        # ``lock:<name>`` (a session lock the server frees when the session ends) or
        # ``pid:<boot id>:<pid namespace>:<start ticks>`` (SQLite: the pid on the same
        # host, and when it started, so a reused pid is told apart); NULL:
        # only the heartbeat tells.
        Column("session_mark", String(255), nullable=True),
        # JSON {actor type: {"operations": [...], "state_version": n}}: what the code of
        # the process can run (schema 13; NULL: an older process, it runs what it knows).
        Column("capabilities", big_text(), nullable=True),
        Index(f"{prefix}processes_expiry", "stopped_at", "expires_at"),
    )
    Table(
        f"{prefix}broadcasts",
        md,
        # The realtime outbox (schema 9): one row per committed turn that changed what an
        # actor's subscribers may see. actor_pk is the incarnation (never reused, larger
        # for a later one), revision the seq of the turn that wrote it.
        Column("actor_pk", BigInteger, primary_key=True, autoincrement=False),
        Column("revision", BigInteger, primary_key=True, autoincrement=False),
        Column("actor_type", ident(128), nullable=False),
        Column("actor_id", ident(255), nullable=False),
        Column("changes", big_text(), nullable=False),
        Column("created_at", BigInteger, nullable=False),
        Index(f"{prefix}broadcasts_identity", "actor_type", "actor_id", "actor_pk", "revision"),
        Index(f"{prefix}broadcasts_created", "created_at"),
        sqlite_with_rowid=False,
    )
    Table(
        f"{prefix}secrets",
        md,
        # Random keys the library alone reads (schema 11): ``notice_key`` signs the
        # wake-up payloads that carry data (store/notices.py).
        Column("name", String(64), primary_key=True),
        Column("value", String(128), nullable=False),
    )
    Table(
        f"{prefix}peers",
        md,
        # Where each process of a ``wakeup_url="peer://"`` deployment receives wake-up
        # datagrams (schema 16): ``host:port``, renewed before ``expires_at``.
        Column("owner", String(64), primary_key=True),
        Column("address", String(300), nullable=False),
        Column("expires_at", BigInteger, nullable=False),
    )
    Table(
        f"{prefix}journal",
        md,
        # The per-turn journal of actor classes that set ``journaled = True`` (schema
        # 15): one row per finished message, the state the turn ran against and the
        # state it committed (NULL: unchanged or failed). Pruned with its message.
        Column("message_id", String(32), primary_key=True),
        Column("actor_pk", BigInteger, nullable=False),
        Column("seq", BigInteger, nullable=False),
        Column("status", String(16), nullable=False),
        Column("state_before", big_text(), nullable=True),
        Column("state_after", big_text(), nullable=True),
        Column("state_version", Integer, nullable=False),
        Column("created_at", BigInteger, nullable=False),
        Index(f"{prefix}journal_actor", "actor_pk", "seq"),
    )
    Table(
        f"{prefix}projections",
        md,
        # The projection tables of actor types that declare ``@projection`` values
        # (schema 15): which table, and the definition its rows were computed with.
        Column("actor_type", ident(128), primary_key=True),
        Column("table_name", String(64), nullable=False),
        Column("fingerprint", String(64), nullable=False),
    )
    Table(
        f"{prefix}type_locks",
        md,
        # One row per actor type with a ``max_active_turns`` (schema 17): a claim of
        # such a type locks it, so two processes never both count the live claims
        # below the limit and both take one.
        Column("actor_type", ident(128), primary_key=True),
    )
    Table(
        f"{prefix}effect_limits",
        md,
        # Flow control of one effect name (schema 18, store/effect_limits.py): the limits
        # the last process to start declared, and the database-clock times of the latest
        # starts (a JSON list, at most rate_count of them). Its row lock serializes the
        # claimers of the name on every process.
        Column("name", ident(255), primary_key=True),
        Column("rate_count", Integer, nullable=True),
        Column("rate_per_ms", BigInteger, nullable=True),
        Column("max_concurrent", Integer, nullable=True),
        Column("recent_starts", big_text(), nullable=True),
        Column("declared_by", String(64), nullable=True),
        Column("updated_at", BigInteger, nullable=False),
    )
    define_admin_tables(md, prefix)
    for table in md.tables.values():
        # Every text column compares byte by byte on MySQL/MariaDB, not only the ones
        # declared with ident: names, keys and ids are case- and accent-sensitive.
        table.dialect_kwargs["mysql_charset"] = "utf8mb4"
        table.dialect_kwargs["mysql_collate"] = "utf8mb4_bin"
    return md


def queryable_actors(prefix: str) -> Table:
    """The actors table as the application reads it with SQLAlchemy Core: identity,
    state as ``JSON`` (so ``table.c.state["items"]`` compiles to each database's JSON
    path operator) and the state version and times. Only what is safe to read; the
    lease and mailbox columns are the engine's."""
    return Table(
        f"{prefix}actors",
        MetaData(),
        Column("actor_type", String(128), nullable=False),
        Column("actor_id", String(255), nullable=False),
        Column("state", JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True),
        Column("state_version", Integer, nullable=False),
        Column("created_at", BigInteger, nullable=False),
        Column("updated_at", BigInteger, nullable=False),
    )


assert len(MIGRATIONS) == SCHEMA_VERSION


def installed_version(conn: Connection, prefix: str) -> int | None:
    """The installed schema version, or None when the tables do not exist."""
    from sqlalchemy import inspect

    if not inspect(conn).has_table(f"{prefix}schema"):
        return None
    row = conn.execute(
        text(f"SELECT version FROM {prefix}schema WHERE name = 'solid_objects'")
    ).first()
    return None if row is None else int(row[0])


def install(conn: Connection, dialect: Dialect, prefix: str) -> int:
    """Bring the schema to SCHEMA_VERSION; safe to run from several processes at once."""
    dialect.lock_for_install(conn)
    try:
        return _install_locked(conn, dialect, prefix)
    finally:
        dialect.unlock_after_install(conn)


def _install_locked(conn: Connection, dialect: Dialect, prefix: str) -> int:
    md = build_metadata(prefix)
    md.info["dialect"] = dialect
    current = installed_version(conn, prefix) or 0
    if current > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"the database holds schema version {current}; this Solid Objects knows "
            f"{SCHEMA_VERSION}. Upgrade the library."
        )
    for version in range(current, SCHEMA_VERSION):
        MIGRATIONS[version](conn, md)
    if current == 0:
        conn.execute(
            text(f"INSERT INTO {prefix}schema (name, version) VALUES ('solid_objects', :v)"),
            {"v": SCHEMA_VERSION},
        )
    elif current < SCHEMA_VERSION:
        conn.execute(
            text(f"UPDATE {prefix}schema SET version = :v WHERE name = 'solid_objects'"),
            {"v": SCHEMA_VERSION},
        )
    return SCHEMA_VERSION


def check_installed(conn: Connection, prefix: str) -> None:
    version = installed_version(conn, prefix)
    if version is None:
        raise SchemaNotInstalled(
            "the Solid Objects tables are not installed in this database: call "
            "runtime.install() or run `solid-objects install module:runtime`"
        )
    if version < SCHEMA_VERSION:
        raise SchemaNotInstalled(
            f"the database holds schema version {version}; this code needs "
            f"{SCHEMA_VERSION}: call runtime.install() to upgrade"
        )
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"the database holds schema version {version}; this code knows "
            f"{SCHEMA_VERSION}. Upgrade the library."
        )


def install_sql(engine_dialect: Any, prefix: str) -> str:
    """The DDL of a fresh install (tables, indexes, version row) for a DBA to review."""
    from sqlalchemy.schema import CreateIndex, CreateTable

    md = build_metadata(prefix)
    statements = []
    for table in md.sorted_tables:
        statements.append(str(CreateTable(table).compile(dialect=engine_dialect)).strip())
        for index in sorted(table.indexes, key=lambda i: i.name or ""):
            statements.append(str(CreateIndex(index).compile(dialect=engine_dialect)).strip())
    statements.append(
        f"INSERT INTO {prefix}secrets (name, value) VALUES ('{KEY_NAME}', '{new_secret()}')"
    )
    statements.append(
        f"INSERT INTO {prefix}schema (name, version) VALUES ('solid_objects', {SCHEMA_VERSION})"
    )
    return ";\n\n".join(statements) + ";"
