"""Django models and turns: write them from a commit action through ``ctx.connection``.

Django's ORM writes on its own connection (``connections[alias]``), never on the
turn's: a ``Model.save()`` from actor code or from a commit action would commit on
its own, outside the fenced commit, so it would stay done when the turn is refused
(a worker that lost its lease) or retried. The supported way is a commit action that
writes the model's table through ``ctx.connection``, the turn's own transaction;
:func:`table` describes the table from the model, so no table or column name is
repeated::

    @commit_action("record_order")
    def record_order(ctx, cart: str, total: int) -> None:
        ctx.connection.execute(table(Order).insert().values(cart=cart, total=total))

:func:`refuse_escaping_writes` is installed on every Django connection (the app's
``ready()``): inside an actor operation or a commit action, a write through Django's
ORM raises ApplicationWriteForbidden instead of committing on its own; reads pass.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import TableClause, column
from sqlalchemy import table as sql_table

from ... import guard
from ...errors import ApplicationWriteForbidden


def table(model: Any) -> TableClause:
    """The SQLAlchemy table of a Django model: its ``db_table`` and concrete columns.

    Columns are named as in the database (a ``ForeignKey`` ``cart`` is ``cart_id``).
    """
    meta = model._meta
    return sql_table(meta.db_table, *(column(field.column) for field in meta.concrete_fields))


#: Django connections the runtime's own threads (``solid-worker-N``, ``solid-effect``)
#: used: an ORM read in an operation, an effect handler's writes. Django closes a
#: connection only at the end of a request, so :func:`close_turn_connections` closes
#: these when the runtime closes.
_opened_in_turns: weakref.WeakSet[Any] = weakref.WeakSet()
_opened_lock = threading.Lock()


def refuse_escaping_writes(
    execute: Callable[..., Any], sql: str, params: Sequence[Any], many: bool, context: Any
) -> Any:
    """A Django ``execute_wrapper``: no ORM write that would commit apart from a turn."""
    if threading.current_thread().name.startswith("solid-"):
        with _opened_lock:
            _opened_in_turns.add(context["connection"])
    current = guard.scope()
    if current is not None and not guard.is_read(sql):
        what, _allowed = current
        raise ApplicationWriteForbidden(
            f"{what} wrote through Django's connection ({sql.split(None, 1)[0]} ...): that "
            "write would commit apart from the turn and stay done if the turn is refused or "
            "retried. Stage it with self.commit_action(name, ...) and write the model's "
            "table through ctx.connection: ctx.connection.execute(table(Model).insert()...)"
        )
    return execute(sql, params, many, context)


def guard_connection(sender: Any = None, connection: Any = None, **_: Any) -> None:
    """``connection_created`` receiver: install :func:`refuse_escaping_writes` once."""
    if connection is not None and refuse_escaping_writes not in connection.execute_wrappers:
        connection.execute_wrappers.append(refuse_escaping_writes)


def close_turn_connections() -> None:
    """Close the Django connections the runtime's threads used (they are stopped now).

    PostgreSQL refuses to drop a database with open sessions: the test runner's
    teardown needs these closed too.
    """
    with _opened_lock:
        opened = list(_opened_in_turns)
        _opened_in_turns.clear()
    for connection in opened:
        connection.inc_thread_sharing()  # closed from the thread that closes the runtime
        try:
            with contextlib.suppress(Exception):  # already closed, or the server went away
                connection.close()
        finally:
            connection.dec_thread_sharing()
