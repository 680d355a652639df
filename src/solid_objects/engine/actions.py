"""Commit actions: the application's own writes, inside a turn's fenced transaction.

A turn stages ``self.commit_action(name, **arguments)``; at commit the handler
registered with ``@runtime.commit_action(name)`` runs after the fence UPDATE
succeeded, in the same transaction, with a SQLAlchemy connection on it. A
handler that raises rolls back the whole turn (to a savepoint taken before the
turn's writes) and the message is retried like any failed turn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import Connection, Engine

from ..guard import fenced
from ..registry import NamedHandlers
from ..staging import StagedAction
from ..store import MessageRow, Tx


@dataclass(frozen=True, slots=True)
class CommitContext:
    """What a commit action gets: the transaction's connection and where it comes from."""

    connection: Connection
    name: str
    actor_type: str
    actor_id: str
    message_id: str


def run_actions(
    engine: Engine,
    handlers: NamedHandlers,
    tx: Tx,
    message: MessageRow,
    actions: list[StagedAction],
) -> None:
    # A Connection over the transaction's own DB-API connection: the handler's
    # statements join the turn's transaction. It is never closed here (closing it
    # would return the connection to the pool in the middle of the transaction).
    connection = Connection(engine, connection=tx.connection)
    own = tx.connection.dbapi_connection  # its writes commit with the turn
    for action in actions:
        ctx = CommitContext(
            connection, action.name, message.actor_type, message.actor_id, message.id
        )
        with fenced(f"commit action {action.name!r}", allowed=own):
            handlers.get(action.name)(ctx, **json.loads(action.arguments))
