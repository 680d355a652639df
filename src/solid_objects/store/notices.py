"""Every cross-process notice: its payload, size limit, parsing and authentication.

A notice travels on the wake-up channel (PostgreSQL ``NOTIFY`` inside the
committing transaction, or Redis Pub/Sub after the commit). Anyone who can
connect to the database server, or to the Redis server, can listen on that channel
and send on it, so a notice is a *hint*: what it carries decides what a caller is
told or what a turn runs only when its MAC proves that the library wrote it.

==========================================  =========================================
``w``                                       new work somewhere: wake the poller
``h:<pk>:<owner>``                          new work for an actor ``owner`` holds
``m:<pk>:<owner>:<seq>:<at>:<fields>#<mac>``  the same, carrying the message (signed)
``d:<message id>``                          a message finished: its waiter reads the row
``o:[id,status,result,error]#<mac>``        the same, carrying the outcome (signed)
``b:[actor_type,actor_id]``                 an actor broadcast: realtime readers read it
==========================================  =========================================

The MAC is HMAC-SHA256 (hex) of everything before ``#``, keyed with the random
secret in ``{prefix}secrets`` (written by the install, readable by the library's
database role alone). A payload whose MAC is missing or wrong is treated as the
plain hint of its kind (read the mailbox, read the row), never as data; every parse
here is total: anything malformed parses to "read what the database says".
PostgreSQL's one-statement enqueue signs its ``m:`` in SQL (:meth:`NoticeKey.sql_mac`,
the same HMAC from the built-in ``sha256``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import threading
from collections.abc import Callable
from typing import Any

from .rows import MessageRow

#: Longest payload, ``m:`` or ``o:`` (PostgreSQL refuses a NOTIFY payload of 8,000
#: bytes or more).
MAX_NOTIFY_PAYLOAD = 7900
#: ``#`` and the MAC's 64 hex digits, after the signed text.
_MAC = 1 + 64
#: What ``m:``, the pk, the owner (``lease_owner`` is 64 characters at most), the
#: seq, the clock, the separators and the MAC add to the fields.
_FRAME = 2 + 20 + 64 + 20 + 20 + 4 + _MAC
#: The name of the row of ``{prefix}secrets`` that keys the MAC.
KEY_NAME = "notice_key"

_NUMBER = re.compile(r"[0-9]{1,19}")
_HEX = re.compile(r"[0-9a-f]{64}")


def _number(text: str) -> int | None:
    """A non-negative integer in ASCII digits, else None (``"²".isdigit()`` is True)."""
    return int(text) if _NUMBER.fullmatch(text) else None


def new_secret() -> str:
    """A fresh MAC key for ``{prefix}secrets``, as 64 hex digits."""
    return secrets.token_hex(32)


class NoticeKey:
    """The MAC key of the notices of one set of tables, read once when first needed.

    ``load`` returns the stored secret (hex), or None when there is none: then this
    process signs with a key of its own, so what it sends reaches other processes
    as plain hints, and what they send reaches it so (slower, never wrong).
    """

    def __init__(self, load: Callable[[], str | None]) -> None:
        self._load = load
        self._lock = threading.Lock()
        self._mac: Any = None
        self._pads: tuple[bytes, bytes] | None = None

    def load(self) -> None:
        """Read the key now (the schema is installed), not in the first enqueue."""
        self._key()

    def _key(self) -> Any:
        mac = self._mac
        if mac is None:
            with self._lock:
                if self._mac is None:
                    stored = self._load()
                    key = bytes.fromhex(stored) if stored else secrets.token_bytes(32)
                    padded = key.ljust(64, b"\0")
                    self._pads = (
                        bytes(b ^ 0x36 for b in padded),
                        bytes(b ^ 0x5C for b in padded),
                    )
                    self._mac = hmac.new(key, digestmod=hashlib.sha256)
                mac = self._mac
        return mac

    def mac(self, text: str) -> str:
        h = self._key().copy()
        h.update(text.encode())
        return str(h.hexdigest())

    def sign(self, text: str) -> str:
        """``text`` with its MAC appended."""
        return f"{text}#{self.mac(text)}"

    def verify(self, payload: str) -> str | None:
        """The signed text of ``payload`` when its MAC is right, else None."""
        if len(payload) < _MAC or payload[-_MAC] != "#":
            return None
        text, mac = payload[:-_MAC], payload[-64:]
        if not _HEX.fullmatch(mac):
            return None
        return text if hmac.compare_digest(self.mac(text), mac) else None

    def sql_params(self) -> dict[str, bytes]:
        """The padded inner and outer keys that :meth:`sql_mac` reads."""
        self._key()
        assert self._pads is not None
        return {"notice_ikey": self._pads[0], "notice_okey": self._pads[1]}

    @staticmethod
    def sql_mac(text: str) -> str:
        """PostgreSQL (11 or later): the hex HMAC-SHA256 of the text expression ``text``,
        the same as :meth:`mac`, from the built-in ``sha256`` (no extension)."""
        return (
            "encode(sha256(CAST(:notice_okey AS BYTEA) || sha256(CAST(:notice_ikey AS BYTEA) "
            f"|| convert_to({text}, 'UTF8'))), 'hex')"
        )


# --- w, d:, h:, b: (plain hints) ------------------------------------------------------

WAKE = "w"


def done_hint(message_id: str) -> str:
    """``d:<id>``: that message finished; its waiter reads the row."""
    return f"d:{message_id}"


def parse_done_hint(payload: str) -> str | None:
    return payload[2:] if payload.startswith("d:") else None


def held_hint(pk: int, owner: str) -> str:
    """New work in a mailbox whose lease ``owner`` holds.

    Only the owning process acts on it (its worker reads the mailbox); every other
    process ignores it, since none may claim an unexpired lease: one wake-up per
    enqueue instead of every poller reading the ready actors.
    """
    return f"h:{pk}:{owner}"


def parse_held_hint(payload: str) -> tuple[int, str] | None:
    """``(pk, owner)`` of a :func:`held_hint` payload, or None for anything else."""
    if not payload.startswith("h:"):
        return None
    pk_text, sep, owner = payload[2:].partition(":")
    pk = _number(pk_text)
    if not sep or pk is None:
        return None
    return pk, owner


def broadcast_hint(actor_type: str, actor_id: str) -> str:
    """``b:``: that actor broadcast something; realtime endpoints read it."""
    return "b:" + json.dumps([actor_type, actor_id], separators=(",", ":"))


def parse_broadcast_hint(payload: str) -> tuple[str, str] | None:
    """The identity of a ``b:`` payload, or None for anything else."""
    if not payload.startswith("b:"):
        return None
    fields = _json(payload[2:])
    if not isinstance(fields, list) or len(fields) != 2:
        return None
    actor_type, actor_id = fields
    if not isinstance(actor_type, str) or not isinstance(actor_id, str):
        return None
    return actor_type, actor_id


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _strings(fields: Any, required: int, optional: int) -> bool:
    """A JSON list of ``required`` strings, then ``optional`` strings or nulls."""
    return (
        isinstance(fields, list)
        and len(fields) == required + optional
        and all(isinstance(f, str) for f in fields[:required])
        and all(f is None or isinstance(f, str) for f in fields[required:])
    )


# --- o: (a signed outcome) ------------------------------------------------------------


def outcome_notice(
    key: NoticeKey, message_id: str, status: str, result: str | None, error: str | None
) -> str:
    """What a finished message announces: its outcome, signed, when it fits.

    ``o:`` carries what the waiter would read from the row (status, result and error
    JSON), so a caller in another process settles without a statement; a larger one
    announces ``d:<id>`` and the waiter reads the row.
    """
    text = "o:" + json.dumps([message_id, status, result, error], separators=(",", ":"))
    if len(text) + _MAC > MAX_NOTIFY_PAYLOAD:
        return done_hint(message_id)
    return key.sign(text)


def read_outcome(payload: str, key: NoticeKey) -> tuple[str, str, str | None, str | None] | None:
    """``(id, status, result, error)`` of an authentic ``o:`` payload, else None."""
    if not payload.startswith("o:"):
        return None
    text = key.verify(payload)
    if text is None:
        return None
    fields = _json(text[2:])
    if not _strings(fields, 2, 2):
        return None
    message_id, status, result, error = fields
    return message_id, status, result, error


def outcome_id(payload: str) -> str | None:
    """The message id an ``o:`` payload names, authentic or not (to nudge its waiter)."""
    if not payload.startswith("o:"):
        return None
    body = payload[2:]
    if len(body) > _MAC and body[-_MAC] == "#":
        body = body[:-_MAC]
    fields = _json(body)
    if isinstance(fields, list) and fields and isinstance(fields[0], str):
        return fields[0]
    return None


# --- m: (a signed message for its actor's lease owner) ---------------------------------


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


def message_hint(key: NoticeKey, pk: int, owner: str, seq: int, at_ms: int, fields: str) -> str:
    """The signed ``m:`` payload; PostgreSQL's one-statement enqueue writes the same
    (with ``NoticeKey.sql_mac``)."""
    return key.sign(f"m:{pk}:{owner}:{seq}:{at_ms}:{fields}")


def parse_message_hint(
    payload: str, owner: str, key: NoticeKey
) -> tuple[int | None, MessageRow | None] | None:
    """What ``owner`` does with an ``m:`` payload.

    None: another owner's (ignore it). ``(pk, message)``: put the authentic message in
    the activation's inbox. ``(pk, None)``: not authentic, or malformed fields: read
    the mailbox. ``(None, None)``: ours, but no pk to signal (wake the poller).
    """
    pk_text, _, rest = payload[2:].partition(":")
    if not rest.startswith(owner + ":"):
        return None
    pk = _number(pk_text)
    if pk is None:
        return None, None
    text = key.verify(payload)
    if text is None:
        return pk, None
    seq_text, _, rest = text[2 + len(pk_text) + 1 + len(owner) + 1 :].partition(":")
    at_text, _, fields_text = rest.partition(":")
    seq, at_ms = _number(seq_text), _number(at_text)
    fields = _json(fields_text)
    if seq is None or at_ms is None or not _strings(fields, 5, 3):
        return pk, None
    message_id, actor_type, actor_id, operation, arguments, idem, traceparent, sender = fields
    return pk, MessageRow(
        id=message_id,
        actor_pk=pk,
        actor_type=actor_type,
        actor_id=actor_id,
        seq=seq,
        operation=operation,
        arguments=arguments,
        idempotency_key=idem,
        status="queued",
        attempts=0,
        result=None,
        error=None,
        available_at=at_ms,
        traceparent=traceparent,
        created_at=at_ms,
        sender=sender,
    )
