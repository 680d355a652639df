"""``self.current_message``: what a turn knows about the message it is running.

Users deduplicate on the message id (stable across retries) and log the sender.
The sender is stored on the message row (``messages.sender``, schema 7) as a
small JSON document written by whoever enqueued it: a turn's ``send_to``, a
reminder firing, an effect's callback; a caller outside any actor writes none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

SenderKind = Literal["caller", "actor", "reminder", "effect"]


@dataclass(frozen=True, slots=True)
class Sender:
    """Who enqueued a message.

    ``actor``: ``actor_type``/``actor_id`` are the sending actor. ``reminder``: the
    reminder's ``key`` (None for the unkeyed one) on this actor. ``effect``: the
    effect ``key`` (its id) whose outcome this callback delivers. ``caller``: a
    runtime or ref call from outside any actor (also every message written before
    schema 7).
    """

    kind: SenderKind
    actor_type: str | None = None
    actor_id: str | None = None
    key: str | None = None


@dataclass(frozen=True, slots=True)
class MessageInfo:
    """The running message, as ``self.current_message`` returns it.

    ``enqueued_at`` and ``due_at`` are the database clock's values stored on the row,
    in UTC (``due_at`` differs from ``enqueued_at`` for delayed sends and reminders).
    ``attempt`` is 1 on the first run and grows with each retry.
    """

    id: str
    operation: str
    attempt: int
    enqueued_at: datetime
    due_at: datetime
    idempotency_key: str | None
    sender: Sender


CALLER = Sender("caller")


def decode_sender(stored: str | None) -> Sender:
    """Read the form :func:`solid_objects.store.rows.encode_sender` wrote."""
    if stored is None:
        return CALLER
    doc = json.loads(stored)
    return Sender(
        kind=doc["kind"],
        actor_type=doc.get("actor_type"),
        actor_id=doc.get("actor_id"),
        key=doc.get("key"),
    )
