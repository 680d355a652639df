"""Refuse a call made while its own thread holds SQLite's write lock.

SQLite has one writer. A thread that has written through an SQLAlchemy connection and
not committed holds the database's write lock; if it then calls an actor, the
library's writer waits for that lock, and the caller waits for the writer: nothing
moves until ``busy_timeout`` and the call fails with ``DatabaseError``. The library
sees the connections of the engines it knows (its own, and the application's Engine
given to ``Runtime``) through their ``begin``/``commit``/``rollback`` events, so it can
refuse such a call at once with :class:`SyncInsideTransaction`. A connection it does
not see (a raw ``sqlite3`` connection, another engine on the same file) it cannot
know about: see docs/design-decisions.md.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine, event

from ..errors import SyncInsideTransaction

#: An integration's view of the application transaction the calling thread is in
#: (``Runtime.enlist_sends``): ``finder(kind, what)``, ``kind`` "send" or "call".
Finder = Callable[[str, str], Any]


class OpenTransactions:
    """The SQLAlchemy connections each thread has in a transaction, on watched engines."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._watched: list[Engine] = []
        self._finder: Finder | None = None

    def enlist_with(self, finder: Finder) -> None:
        """Ask ``finder`` before each send and call without ``connection=``."""
        self._finder = finder

    def enlisted(self, kind: str, what: str) -> Any:
        """The connection of the application transaction this thread is in, which a
        send joins; None outside one. The finder raises for a call inside one."""
        return None if self._finder is None else self._finder(kind, what)

    def watch(self, engine: Engine) -> None:
        """Follow ``engine``'s transactions (only worth it for SQLite)."""
        if engine.dialect.name != "sqlite" or any(e is engine for e in self._watched):
            return
        self._watched.append(engine)
        event.listen(engine, "begin", self._began)
        event.listen(engine, "commit", self._ended)
        event.listen(engine, "rollback", self._ended)

    def _open(self) -> weakref.WeakSet[Connection]:
        found: weakref.WeakSet[Connection] | None = getattr(self._local, "open", None)
        if found is None:
            found = self._local.open = weakref.WeakSet()
        return found

    def _began(self, conn: Connection) -> None:
        self._open().add(conn)

    def _ended(self, conn: Connection) -> None:
        self._open().discard(conn)

    def holds_write_lock(self) -> bool:
        """Whether this thread has written through a watched connection and not ended."""
        for conn in list(self._open()):
            if conn.closed or not conn.in_transaction():
                continue
            driver: Any = getattr(conn.connection, "driver_connection", None)
            # sqlite3 opens its transaction (and takes the write lock) at the first write.
            if getattr(driver, "in_transaction", False):
                return True
        return False

    def refuse(self, what: str) -> None:
        """Raise :class:`SyncInsideTransaction` if this thread holds the write lock."""
        if self._watched and self.holds_write_lock():
            raise SyncInsideTransaction(
                f"{what} while this thread holds an uncommitted write transaction on the "
                "same SQLite database: the library's commit would wait for that lock until "
                "busy_timeout. Commit (or roll back) first, or stage the work in the "
                "transaction with a commit action or send it from actor code."
            )
