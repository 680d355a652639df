"""Pooled server connections: pinged only when they may be dead, rolled back only
when their transaction did not end. Both save a round trip per transaction."""

from __future__ import annotations

import select
import time
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.exc import DisconnectionError

from .base import TRANSACTION_ENDED

#: A pooled server connection unused for this long is pinged before it is handed out.
PING_AFTER_IDLE = 1.0


def ping_idle_connections(engine: Engine, idle_seconds: float = PING_AFTER_IDLE) -> None:
    """Ping a pooled connection before use only when it may be dead, not every time.

    SQLAlchemy's ``pool_pre_ping`` costs a round trip per transaction (a quarter of
    a direct call's). Here a connection is pinged when it sat idle, or when its
    socket has input while no query is in flight: a server that closes a connection
    (a restart, ``pg_terminate_backend``, ``KILL``) sends that at once, and a
    ``select()`` with no timeout sees it without a round trip. A dead connection is
    replaced (``DisconnectionError`` makes the pool connect afresh); a write that
    still meets one before COMMIT runs again (``Store.transact``).
    """

    @event.listens_for(engine, "checkin")
    def _checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info["solid_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.pop("solid_idle_since", None)
        if since is None:
            return  # a new connection
        if time.monotonic() - since < idle_seconds and not _has_input(dbapi_conn):
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as exc:
            raise DisconnectionError(f"pooled connection is dead: {exc}") from exc


def rollback_unfinished_transactions(engine: Engine) -> None:
    """On return to the pool, roll back only a connection whose transaction did not end.

    The pool's own reset (``pool_reset_on_return``, off for the servers) rolls back
    every time, and PyMySQL sends that ROLLBACK even right after a COMMIT: a wasted
    round trip per transaction. :meth:`Dialect.write` and :meth:`Dialect.read` mark a
    connection whose transaction they ended; any other is rolled back as before
    (SQLAlchemy ``Connection`` objects roll back their own on close anyway).
    """

    @event.listens_for(engine, "reset")
    def _reset(dbapi_conn: Any, record: Any, state: Any) -> None:
        if not record.info.pop(TRANSACTION_ENDED, False) and not state.terminate_only:
            dbapi_conn.rollback()




def _has_input(dbapi_conn: Any) -> bool:
    """Whether an idle connection's socket is readable: the server closed it, or said
    something unprompted. Unknown drivers count as readable (they get pinged)."""
    try:
        fileno = dbapi_conn.fileno() if hasattr(dbapi_conn, "fileno") else dbapi_conn._sock.fileno()
        readable, _, _ = select.select([fileno], [], [], 0)
    except Exception:
        return True
    return bool(readable)
