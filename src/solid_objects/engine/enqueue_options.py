"""What a caller's per-call options add to an enqueue, and which path it may take.

The :class:`~solid_objects.engine.client.Client` hands these fields to every store
enqueue; :func:`plain_enqueue` says whether the shortcuts of a message with no key and
no delay apply (``store/enqueue_statement.py``, the held actor's two statements), and
refuses the combinations that cannot be enqueued, before anything is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from ..errors import InvalidArguments

if TYPE_CHECKING:
    from ..ref import CallOptions


class QueueFields(TypedDict):
    """What a caller's options add to an enqueue that may wait or be deduplicated."""

    idempotency_key: str | None
    delay_ms: int
    priority: int
    coalesce_key: str | None


def queue_fields(options: CallOptions) -> QueueFields:
    """The options' part of an enqueue, converted the one way the store takes it."""
    return QueueFields(
        idempotency_key=options.idempotency_key,
        delay_ms=int(options.delay * 1000),
        priority=options.priority,
        coalesce_key=options.coalesce_key,
    )


def plain_enqueue(options: CallOptions) -> bool:
    """Whether an enqueue may take the shortcuts of a message with no key and no delay
    (one statement, the held actor's two); else ``mailbox.enqueue``."""
    if options.coalesce_key is not None and options.delay > 0:
        raise InvalidArguments(
            "coalesce_key= replaces a message still queued: it cannot be combined with delay="
        )
    return (
        options.idempotency_key is None and options.delay <= 0 and options.coalesce_key is None
    )
