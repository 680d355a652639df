"""Fences against writes that escape a turn's commit (``runtime.guard(engine)``).

A write that actor code, a state migration or a commit action makes through an
engine of its own commits on its own, whatever becomes of the turn: it stays
done if the turn is refused, rolled back or retried. Inside those three scopes a
guarded engine refuses every statement that is not a read with
:class:`~solid_objects.errors.ApplicationWriteForbidden`; a commit action's own
``ctx.connection`` (the turn's transaction) is the one exception. A statement's
text can hide a write, and ``engine.raw_connection()`` bypasses SQLAlchemy's
events, so a connection checked out inside those scopes is also read-only at the
server until it returns to the pool (``store/read_only.py``).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, event

from . import staging
from .errors import ApplicationWriteForbidden
from .store.read_only import set_read_only, supports_read_only

_local = threading.local()
#: Statements that only read. A ``WITH`` is a read unless it modifies data.
_READ = re.compile(r"\s*(SELECT|SHOW|EXPLAIN|DESCRIBE|PRAGMA\s+\w+\s*$|WITH\b)", re.IGNORECASE)
#: Words that make a statement a write. ``INTO`` catches ``SELECT ... INTO`` (a new
#: table on PostgreSQL, a file or variables on MySQL); ``setval``/``nextval`` change a
#: sequence from a ``SELECT``. The server's read-only session catches what text hides.
_MODIFIES = re.compile(
    r"\b(INSERT|UPDATE|DELETE|MERGE|REPLACE|INTO)\b|\b(setval|nextval)\s*\(",
    re.IGNORECASE,
)
#: Quoted strings and identifiers: their words are data, not the statement's verbs.
_QUOTED = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`[^`]*`")


@contextmanager
def fenced(what: str, allowed: Any = None) -> Iterator[None]:
    """Run ``what`` (a migration, a commit action) with guarded engines refusing writes.

    ``allowed`` is the DB-API connection of the turn's own transaction, whose
    statements commit with it (a commit action's ``ctx.connection``).
    """
    previous = getattr(_local, "scope", None)
    _local.scope = (what, allowed)
    try:
        yield
    finally:
        _local.scope = previous


def scope() -> tuple[str, Any] | None:
    """What runs now that must not write on its own: (what, allowed connection), or None."""
    found: tuple[str, Any] | None = getattr(_local, "scope", None)
    if found is not None:
        return found
    if staging.inside_turn():
        return ("an actor operation", None)
    return None


def is_read(statement: str) -> bool:
    """A statement that only reads, judged by its words outside quoted strings."""
    return bool(_READ.match(statement)) and not _MODIFIES.search(_QUOTED.sub("''", statement))


def refuse_escaping_writes(
    conn: Any, _cursor: Any, statement: str, *_: Any, reads: bool = True
) -> None:
    """``before_cursor_execute``: refuse a statement that would commit apart from the turn."""
    current = scope()
    if current is None:
        return
    what, allowed = current
    if allowed is not None and getattr(conn.connection, "dbapi_connection", None) is allowed:
        return
    if reads and is_read(statement):
        return
    raise ApplicationWriteForbidden(
        f"{what} wrote through an engine of its own ({statement.split(None, 1)[0]} ...): "
        "that write would commit apart from the turn and stay done if the turn is refused "
        "or retried. Stage it with self.commit_action(name, ...) and write through the "
        "handler's ctx.connection, which commits with the turn"
    )


def install(engine: Engine) -> None:
    """Fence ``engine``: refuse escaping writes by their text, and make the connections
    checked out inside a fenced scope read-only at the server until they return."""
    if not event.contains(engine, "before_cursor_execute", refuse_escaping_writes):
        event.listen(engine, "before_cursor_execute", refuse_escaping_writes)
    name = engine.dialect.name
    if not supports_read_only(name):
        return

    def checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        current = scope()
        if current is None or current[1] is dbapi_connection:
            return
        record.info["solid_read_only"] = set_read_only(dbapi_connection, name, True)

    def checkin(dbapi_connection: Any, record: Any) -> None:
        how = record.info.pop("solid_read_only", None)
        if how is not None and dbapi_connection is not None:
            set_read_only(dbapi_connection, name, False, how)

    event.listen(engine, "checkout", checkout)
    event.listen(engine, "checkin", checkin)
