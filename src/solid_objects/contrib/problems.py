"""Library errors as HTTP problem details (RFC 9457), for every framework integration.

The table is keyed by exception class and looked up along the exception's MRO, so
the most specific entry wins (``PayloadTooLarge`` is 413 although it is an
``InvalidArguments``), and an error added later (a new ``errors`` class) gets its
status with one :func:`register` call instead of a change in each framework module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .. import errors

#: The media type of every problem response.
MEDIA_TYPE = "application/problem+json"
#: Prefix of each problem's ``type`` URI (RFC 9457 §3.1.1: a URI that names the kind).
TYPE_BASE = "urn:solid-objects:problem:"


@dataclass(frozen=True, slots=True)
class Problem:
    """How one kind of error is answered: its HTTP status and a short, fixed title."""

    status: int
    title: str


_TABLE: dict[type[Exception], Problem] = {}


def register(cls: type[Exception], status: int, title: str) -> None:
    """Answer ``cls`` (and its subclasses without an entry of their own) with ``status``."""
    if not 400 <= status <= 599:
        raise errors.ConfigurationError(f"a problem's status must be 4xx or 5xx, not {status}")
    _TABLE[cls] = Problem(status, title)


def unregister(cls: type[Exception]) -> None:
    """Remove the entry of ``cls`` (its subclasses fall back to their next ancestor)."""
    _TABLE.pop(cls, None)


def handled() -> tuple[type[Exception], ...]:
    """Every exception class with an entry, for registering framework handlers."""
    return tuple(_TABLE)


def lookup(exc: BaseException) -> Problem | None:
    """The entry of the nearest class in ``exc``'s MRO, or None (not a mapped error)."""
    for cls in type(exc).__mro__:
        if cls in _TABLE:
            return _TABLE[cls]
    return None


def _slug(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()


def document(exc: BaseException) -> dict[str, Any]:
    """The problem details of ``exc``: type, title, status, detail, code, and more.

    ``code`` is machine-readable: a ``Rejected``'s own code, else the error's class
    name. A ``Rejected`` adds ``details``; an error about a stored message adds
    ``message_id`` (for ``CallTimeout``, so the client can poll the message later;
    None only when nothing was written).
    """
    problem = lookup(exc) or Problem(500, "Internal error")
    body: dict[str, Any] = {
        "type": TYPE_BASE + _slug(type(exc).__name__),
        "title": problem.title,
        "status": problem.status,
        "detail": str(exc),
        "code": type(exc).__name__,
    }
    if isinstance(exc, errors.Rejected):
        body.update(detail=exc.message or exc.code, code=exc.code, details=exc.details)
        if exc.message_id is not None:
            body["message_id"] = exc.message_id
    elif isinstance(exc, errors.CallTimeout):
        body["message_id"] = None if exc.message is None else exc.message.id
        body["waiting_on"] = exc.waiting_on
    elif isinstance(exc, errors.MessageFailed):
        # The stored error is the worker's exception text: for operators, not clients.
        body["detail"] = "the message failed and became a dead letter"
        body["message_id"] = exc.message_id
    return body


def headers(exc: BaseException) -> dict[str, str]:
    """Response headers besides the content type (``Retry-After`` for 429 and 503)."""
    problem = lookup(exc)
    if problem is not None and problem.status in (429, 503):
        return {"Retry-After": "1"}
    return {}


# Rejected is 409 Conflict: the actor's current state refuses the request (an empty
# cart cannot check out), which is what 409 means; 422 is kept for input that no
# state would accept (InvalidArguments). See docs/frameworks.md.
register(errors.Rejected, 409, "Rejected by the actor")
register(errors.InvalidArguments, 422, "Invalid arguments")
register(errors.PayloadTooLarge, 413, "Payload too large")
register(errors.IdempotencyConflict, 422, "Idempotency key reused")
register(errors.Unauthorized, 403, "Not authorized")
register(errors.UnknownOperation, 404, "Unknown operation")
register(errors.UnknownActorType, 404, "Unknown actor type")
register(errors.MessageNotFound, 404, "Message not found")
register(errors.NotFound, 404, "Not found")
register(errors.ActorDestroyed, 410, "Actor destroyed")
register(errors.CallTimeout, 504, "Call timed out")
register(errors.MessageFailed, 500, "Message failed")
register(errors.RuntimeNotStarted, 503, "Runtime not running")
register(errors.MailboxFull, 429, "Mailbox full")
# The message was withdrawn before it ran: the request conflicts with what became of it.
register(errors.MessageCancelled, 409, "Message cancelled")
