"""The ``m:`` wake-up: a new message for a held actor, carried to its owner.

An enqueue to an actor whose unexpired lease another process holds announces
``m:<pk>:<owner>:<seq>:<at_ms>:<fields>`` when the message fits in a NOTIFY
payload (else ``h:<pk>:<owner>``, see ``mailbox.held_hint``). The owner puts the
message in the activation's inbox, as it does a message it enqueued itself, so its
worker reads no head; every other process ignores it. The payload is sent only
when the enqueue commits (NOTIFY inside the transaction, Redis after the commit),
so it is committed data; anything malformed is answered by reading the mailbox.
"""

from __future__ import annotations

import json

from .rows import MessageRow

#: Longest wake-up payload, ``m:`` or ``o:`` (PostgreSQL refuses a NOTIFY payload of
#: 8,000 bytes or more).
MAX_NOTIFY_PAYLOAD = 7900
#: What ``m:``, the pk, the owner (``lease_owner`` is 64 characters at most), the
#: seq, the clock and the separators add to the fields.
_FRAME = 2 + 20 + 64 + 20 + 20 + 4


def message_fields(
    message_id: str,
    actor_type: str,
    actor_id: str,
    operation: str,
    arguments: str,
    idempotency_key: str | None,
    traceparent: str | None,
    sender: str | None,
) -> str | None:
    """The fields of an ``m:`` payload that the caller knows, or None when too large.

    ASCII JSON (``ensure_ascii``), so its length is its size in bytes.
    """
    text = json.dumps(
        [
            message_id,
            actor_type,
            actor_id,
            operation,
            arguments,
            idempotency_key,
            traceparent,
            sender,
        ],
        separators=(",", ":"),
    )
    return text if len(text) <= MAX_NOTIFY_PAYLOAD - _FRAME else None


def message_hint(pk: int, owner: str, seq: int, at_ms: int, fields: str) -> str:
    """The ``m:`` payload; the SQL of PostgreSQL's one-statement enqueue writes the same."""
    return f"m:{pk}:{owner}:{seq}:{at_ms}:{fields}"


def parse_message_hint(payload: str, owner: str) -> tuple[int | None, MessageRow | None] | None:
    """What ``owner`` does with an ``m:`` payload.

    None: another owner's (ignore it). ``(pk, message)``: put the message in the
    activation's inbox. ``(pk, None)``: malformed fields, read the mailbox.
    ``(None, None)``: ours, but no pk to signal (wake the poller).
    """
    pk_text, _, rest = payload[2:].partition(":")
    if not rest.startswith(owner + ":"):
        return None
    if not pk_text.isdigit():
        return None, None
    pk = int(pk_text)
    seq_text, _, rest = rest[len(owner) + 1 :].partition(":")
    at_text, _, fields_text = rest.partition(":")
    if not (seq_text.isdigit() and at_text.isdigit()):
        return pk, None
    try:
        fields = json.loads(fields_text)
    except ValueError:
        return pk, None
    if (
        not isinstance(fields, list)
        or len(fields) != 8
        or not all(isinstance(f, str) for f in fields[:5])
        or not all(f is None or isinstance(f, str) for f in fields[5:])
    ):
        return pk, None
    message_id, actor_type, actor_id, operation, arguments, key, traceparent, sender = fields
    at_ms = int(at_text)
    return pk, MessageRow(
        id=message_id,
        actor_pk=pk,
        actor_type=actor_type,
        actor_id=actor_id,
        seq=int(seq_text),
        operation=operation,
        arguments=arguments,
        idempotency_key=key,
        status="queued",
        attempts=0,
        result=None,
        error=None,
        available_at=at_ms,
        traceparent=traceparent,
        created_at=at_ms,
        sender=sender,
    )
