"""The application's transaction as the caller hands it over: a Connection or a Session.

``with_options(connection=...)`` takes a SQLAlchemy ``Connection`` or ORM
``Session``; :func:`resolve` finds the ``Connection`` the enqueue writes on and
a way to run something once the application has committed (to wake workers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, event
from sqlalchemy.orm import Session

from ..errors import InvalidArguments

AfterCommit = Callable[[Callable[[], None]], None]


def resolve(target: Any) -> tuple[Connection, AfterCommit]:
    """The connection to enqueue on, and how to run a callback after its commit.

    A Session fires ``after_commit`` once the database has committed. A bare
    Connection only tells us *as* it commits, so a worker woken then may look too
    early; it then finds the message on its next poll.
    """
    if isinstance(target, Session):
        session = target

        def after_session_commit(callback: Callable[[], None]) -> None:
            event.listen(session, "after_commit", lambda _session: callback(), once=True)

        return session.connection(), after_session_commit
    if isinstance(target, Connection):
        connection = target

        def after_connection_commit(callback: Callable[[], None]) -> None:
            event.listen(connection, "commit", lambda _conn: callback(), once=True)

        return connection, after_connection_commit
    raise InvalidArguments(
        "connection= takes a SQLAlchemy Connection or Session (sync) on the runtime's "
        f"database, not {type(target).__name__}"
    )
