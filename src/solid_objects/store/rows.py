"""The rows the statements return, and the ids and fence tokens they carry.

Shared by every statement module of the store (mailbox, turns, outbox, admin),
so it imports none of them. ``MSG_COLS`` and :func:`message_row` are the one
place the column order of a selected message is written down.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Ids and fence tokens must be unique, not secret; os.urandom costs ~150 µs per call on
# some virtual machines, so draw from a generator seeded from it (reseeded after fork).
_random = random.Random(secrets.randbits(128))
os.register_at_fork(after_in_child=lambda: _random.seed(secrets.randbits(128)))


_id_lock = threading.Lock()
_last_id = 0


def new_id() -> str:
    """A 32-hex-digit id that sorts by creation time (48-bit ms clock + 80 random bits).

    Within a process each id is greater than the one before, also within a millisecond
    or when the clock steps back (then the last id plus a random step): what one process
    makes in a row (a turn's effects, a test's sends) lists in that order by id.
    """
    global _last_id
    candidate = (int(time.time() * 1000) << 80) | _random.getrandbits(80)
    with _id_lock:
        if candidate <= _last_id:
            candidate = _last_id + 1 + _random.getrandbits(32)
        _last_id = candidate
    return f"{candidate:032x}"


def new_token() -> str:
    return f"{_random.getrandbits(64):016x}"


def new_owner() -> str:
    return f"{os.getpid()}-{new_token()}"


@dataclass(frozen=True, slots=True)
class Lease:
    """The fence of one activation: all four must still match at commit."""

    pk: int
    owner: str
    token: str
    generation: int


@dataclass(slots=True)
class MessageRow:
    id: str
    actor_pk: int
    actor_type: str
    actor_id: str
    seq: int | None
    operation: str
    arguments: str
    idempotency_key: str | None
    status: str
    attempts: int
    result: str | None
    error: str | None
    available_at: int
    #: W3C trace context of the span that sent it (tracing carried across processes).
    traceparent: str | None = None
    #: When it was written, on the database clock (ms); None before it is written.
    created_at: int | None = None
    #: Who sent it, as JSON (see ``solid_objects.message``); None for a caller.
    sender: str | None = None


@dataclass(slots=True)
class Claimed:
    """An actor whose lease this process now holds, with its committed state and head."""

    lease: Lease
    actor_type: str
    actor_id: str
    state: str | None
    state_version: int
    done_seq: int
    attempt: int
    head: MessageRow | None


@dataclass(slots=True)
class Enqueued:
    message: MessageRow
    existing: bool
    claimed: Claimed | None
    #: How many queued messages this one replaced (``coalesce_key``, store/coalescing.py).
    replaced: int = 0


@dataclass(slots=True)
class ReadyActor:
    pk: int
    lease_owner: str | None
    lease_generation: int
    #: ``(actor_type, actor_id)``: the order in which several claims lock actor rows.
    key: tuple[str, str] = ("", "")


@dataclass(frozen=True, slots=True)
class Due:
    """Milliseconds from now until the earliest work of each kind; None when there is none."""

    actor_backoff: int | None
    delayed_message: int | None
    reminder: int | None
    effect: int | None


@dataclass(slots=True)
class ActorStatus:
    """What a timed-out caller is waiting on."""

    done_seq: int
    next_seq: int
    attempt: int
    ready_at: int | None
    lease_owner: str | None
    lease_expires_at: int | None
    paused: bool
    now: int
    #: The version of its stored state (code older than it cannot run the actor).
    state_version: int = 1


def encode_sender(kind: str, **fields: str | None) -> str:
    """The stored form of a message's sender (``messages.sender``): a small JSON object."""
    return json.dumps({"kind": kind, **fields}, sort_keys=True, separators=(",", ":"))


def request_sender(sender: str, route: str) -> str:
    """The sender of a request: the asker, with the route its outcome goes back by."""
    return sender[:-1] + ',"reply":' + route + "}"


def reply_route_of(sender: str | None) -> dict[str, Any] | None:
    """The reply route a request's sender carries (:func:`request_sender`), if any."""
    if sender is None or '"reply":' not in sender:
        return None
    route: dict[str, Any] | None = json.loads(sender).get("reply")
    return route


MSG_COLS = (
    "id, actor_pk, actor_type, actor_id, seq, operation, arguments, idempotency_key, "
    "status, attempts, result, error, available_at, traceparent, created_at, sender"
)


def message_row(row: Sequence[Any], offset: int = 0) -> MessageRow:
    r = tuple(row)[offset : offset + 16]
    return MessageRow(
        id=r[0],
        actor_pk=int(r[1]),
        actor_type=r[2],
        actor_id=r[3],
        seq=None if r[4] is None else int(r[4]),
        operation=r[5],
        arguments=r[6],
        idempotency_key=r[7],
        status=r[8],
        attempts=int(r[9]),
        result=r[10],
        error=r[11],
        available_at=int(r[12]),
        traceparent=r[13],
        created_at=None if r[14] is None else int(r[14]),
        sender=r[15],
    )


@dataclass(slots=True)
class Committed:
    """What a turn's commit produced: the next head (if read) and messages it sent.

    ``outbound`` messages are ``scheduled``; those in ``due_now`` should be promoted
    into their mailboxes right away (see ``store.promotion.enqueue_later``).
    """

    next_head: MessageRow | None
    outbound: list[MessageRow]
    due_now: list[tuple[str, int]]


def scheduled_message(
    message_id: str,
    pk: int,
    actor_type: str,
    actor_id: str,
    operation: str,
    arguments: str,
    idempotency_key: str | None,
    available_at: int,
    traceparent: str | None = None,
    sender: str | None = None,
) -> MessageRow:
    """A new message, not yet in the ordered mailbox (no sequence number)."""
    return MessageRow(
        id=message_id,
        actor_pk=pk,
        actor_type=actor_type,
        actor_id=actor_id,
        seq=None,
        operation=operation,
        arguments=arguments,
        idempotency_key=idempotency_key,
        status="scheduled",
        attempts=0,
        result=None,
        error=None,
        available_at=available_at,
        traceparent=traceparent,
        sender=sender,
    )
