"""Proof from the database (or the host) that a process is gone, not merely late.

A worker holds a *session mark* on a dedicated connection for as long as it
runs: a session-level advisory lock (PostgreSQL) or a named lock (MySQL,
MariaDB). The server drops the mark the moment that session ends, so a peer
that finds a registered process's mark free knows the process (or at least its
session) is gone and can recover it without waiting for the heartbeat to
expire. SQLite has no server: :func:`pid_gone` asks the host instead.

The mark is evidence for speed, never for safety: recovering a process takes
its leases away (new token), so a holder that is in fact alive has its commit
refused by the lease fence, exactly as after a missed heartbeat.

What the mark cannot see: behind PgBouncer in transaction mode a session lock
lands on a pooled server session that is not this process's: it would outlive
the process (peers wait for the heartbeat) or vanish while the process runs
(when the pooler closes that session), so with ``pooler="transaction"`` the
mark is held on a ``listen_url`` connection, which reaches the server directly,
or not at all (no engine: ``hold`` says False, peers fall back to the
heartbeat); on Galera ``GET_LOCK`` is node-local, so a peer on
another node sees every mark free (use the heartbeat there).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

#: MySQL/MariaDB lock names are at most 64 characters.
_NAME_MAX = 64


def mark_name(prefix: str, owner: str) -> str:
    """The lock name of ``owner``'s mark (scoped by the table prefix)."""
    return f"solid:{prefix}{owner}"[:_NAME_MAX]


_PG_KEY = "hashtextextended(:name, 0)"
#: A bigint advisory key is stored in pg_locks as classid (high) and objid (low).
_PG_HELD = (
    "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
    f"AND ((classid::bigint << 32) | objid::bigint) = {_PG_KEY}"
)


def _galera(conn: Connection) -> bool:
    """Whether this MySQL/MariaDB server replicates with Galera (``wsrep_on``)."""
    row = conn.execute(text("SHOW VARIABLES LIKE 'wsrep_on'")).first()
    return row is not None and str(row[1]).upper() == "ON"


class SessionMark:
    """This process's mark, held on a connection of its own until :meth:`release`."""

    def __init__(self, engine: Engine | None, family: str, name: str) -> None:
        self.engine = engine
        self.family = family
        self.name = name
        self._conn: Connection | None = None

    @property
    def held(self) -> bool:
        return self._conn is not None

    def hold(self) -> bool:
        """Take the mark; False where the database cannot give one (SQLite) or the
        session it lands on is not provably this process's own."""
        if self.family not in ("postgresql", "mysql") or self._conn is not None:
            return self._conn is not None
        if self.engine is None:
            return False
        conn = self.engine.connect()
        try:
            if self.family == "postgresql":
                got = conn.execute(
                    text(f"SELECT pg_try_advisory_lock({_PG_KEY})"), {"name": self.name}
                ).scalar()
                # a pooler in transaction mode: the lock is not visible to this session
                mine = conn.execute(
                    text(_PG_HELD + " AND pid = pg_backend_pid()"), {"name": self.name}
                ).first()
                ok = bool(got) and mine is not None
            elif _galera(conn):
                ok = False  # GET_LOCK is node-local there: peers on other nodes see it free
            else:
                got = conn.execute(text("SELECT GET_LOCK(:name, 0)"), {"name": self.name}).scalar()
                mine = conn.execute(
                    text("SELECT IS_USED_LOCK(:name) = CONNECTION_ID()"), {"name": self.name}
                ).scalar()
                ok = got == 1 and bool(mine)
            conn.commit()
        except BaseException:
            conn.invalidate()
            conn.close()
            raise
        if not ok:
            conn.invalidate()
            conn.close()
            return False
        self._conn = conn
        return True

    def session_id(self) -> int | None:
        """The server's id of the session holding the mark (backend pid, connection id)."""
        if self._conn is None:
            return None
        sql = "SELECT pg_backend_pid()" if self.family == "postgresql" else "SELECT CONNECTION_ID()"
        value = self._conn.execute(text(sql)).scalar()
        self._conn.commit()
        return None if value is None else int(value)

    def release(self) -> None:
        """Drop the mark by closing its session (the server frees the lock)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.invalidate()
            conn.close()


    def alive(self) -> bool:
        """Whether the mark's session still answers (a dropped connection lost it)."""
        if self._conn is None:
            return False
        try:
            self._conn.execute(text("SELECT 1")).scalar()
            self._conn.commit()
        except Exception:  # any failure of the session means the mark may be gone
            self.release()
            return False
        return True


def direct_mismatch(direct: Engine, engine: Engine) -> str | None:
    """Why the ``listen_url`` engine cannot hear NOTIFY from ``engine``'s commits (nor
    hold marks peers see), or None: a NOTIFY reaches the sessions of one database of
    one server, so both must name the same database on the same server (its start
    time tells two servers apart without superuser rights)."""
    sql = text("SELECT current_database() || '@' || CAST(pg_postmaster_start_time() AS TEXT)")
    try:
        with direct.connect() as conn:
            mine = str(conn.execute(sql).scalar())
        with engine.connect() as conn:
            theirs = str(conn.execute(sql).scalar())
    except Exception as exc:  # the doctor reports it, whatever it is
        return f"cannot compare the two connections: {exc}"
    if mine != theirs:
        return f"listen_url reaches {mine}, the runtime's URL {theirs}"
    return None


def held_sql(family: str) -> str | None:
    """A query with a ``:name`` parameter that returns a row whose first column is not
    NULL while some session holds mark ``name``; None where marks do not exist."""
    if family == "postgresql":
        return _PG_HELD
    if family == "mysql":
        return "SELECT IS_USED_LOCK(:name)"
    return None


def marks_free(conn: Any, family: str, names: Sequence[str]) -> list[str]:
    """Of ``names``, those whose mark no session holds (their holder is gone)."""
    sql = held_sql(family)
    if sql is None:
        return []
    free: list[str] = []
    for name in names:
        row = conn.execute(text(sql), {"name": name}).first()
        if row is None or row[0] is None:
            free.append(name)
    return free


def host_identity() -> str | None:
    """This host's boot id and pid namespace (Linux), None if unknown: two processes
    whose identities match see each other's pids, so one may prove the other gone."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    return f"{boot}:{namespace}"


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (Linux ``/proc``): no wall clock
    is involved, so a process whose clock is skewed is judged like any other. -1 for
    a zombie (it has exited), None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):  # a zombie has exited: only its exit status is left
        return -1
    return int(fields[19])


def pid_gone(pid: int, started: int) -> bool:
    """True if process ``pid`` on this host is gone: no such pid, a zombie, or the pid
    now belongs to a process that started at other ``start_ticks`` (reused)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # someone else's process: /proc still tells when it started
    ticks = start_ticks(pid)
    return ticks is not None and ticks != started
