"""The application's transaction as the caller hands it over, joined by an enqueue.

``with_options(connection=...)`` takes a SQLAlchemy ``Connection`` or ORM
``Session``, or whatever an installed adapter recognises (``solid_objects.contrib
.django`` adds Django's ``connection``). :func:`resolve` turns it into a
:class:`Joined`: the database family, a context that yields the DB-API connection the
enqueue writes on inside the application's transaction, and a way to run something
once the application has committed (to wake workers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, event
from sqlalchemy.orm import Session

from ..errors import ConfigurationError, InvalidArguments

AfterCommit = Callable[[Callable[[], None]], None]


@dataclass(frozen=True, slots=True)
class Joined:
    """An application transaction an enqueue can write in."""

    #: The database family of the application's connection (``sqlite``, ``postgresql``, ...).
    dialect_name: str
    #: Entered around the enqueue: yields ``(dbapi_connection, driver_connection)``
    #: inside the application's transaction, and commits nothing.
    transaction: Callable[[], AbstractContextManager[tuple[Any, Any]]]
    #: Runs a callback once the application's transaction has committed.
    after_commit: AfterCommit


#: What else ``connection=`` takes (named for the error), and the function that
#: recognises it (returning None for anything else).
ADAPTERS: dict[str, Callable[[Any], Joined | None]] = {}


def register(accepts: str, adapter: Callable[[Any], Joined | None]) -> None:
    """Teach ``connection=`` another kind of connection (``accepts``: "or Django's connection")."""
    ADAPTERS[accepts] = adapter


def resolve(target: Any) -> Joined:
    """The application transaction ``target`` stands for.

    A Session fires ``after_commit`` once the database has committed. A bare
    Connection only tells us *as* it commits, so a worker woken then may look too
    early; it then finds the message on its next poll.
    """
    if isinstance(target, Session):
        session = target

        def after_session_commit(callback: Callable[[], None]) -> None:
            event.listen(session, "after_commit", lambda _session: callback(), once=True)

        connection = session.connection()
        return Joined(connection.dialect.name, lambda: _joined(connection), after_session_commit)
    if isinstance(target, Connection):
        plain = target

        def after_connection_commit(callback: Callable[[], None]) -> None:
            event.listen(plain, "commit", lambda _conn: callback(), once=True)

        return Joined(plain.dialect.name, lambda: _joined(plain), after_connection_commit)
    for adapter in ADAPTERS.values():
        joined = adapter(target)
        if joined is not None:
            return joined
    others = "".join(f" {accepts}" for accepts in ADAPTERS)
    raise InvalidArguments(
        "connection= takes a SQLAlchemy Connection or Session (sync) on the runtime's "
        f"database{others}, not {type(target).__name__}"
    )


@contextmanager
def _joined(connection: Connection) -> Iterator[tuple[Any, Any]]:
    if connection.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
        raise ConfigurationError(
            "the connection is in AUTOCOMMIT mode: there is no transaction for the message "
            "to commit with"
        )
    if not connection.in_transaction():
        connection.begin()  # what the application's next statement would do (autobegin)
    raw = connection.connection
    yield raw.dbapi_connection, raw.driver_connection
