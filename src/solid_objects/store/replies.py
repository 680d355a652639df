"""SQL of a request's outcome: the reply a finished request message sends back.

:class:`ReplyStatements` is a part of :class:`~solid_objects.store.Store`. The reply
is written in the transaction that finishes the request message, so it exists if and
only if that finish committed; its idempotency key (``writes.reply_key``) is the one
the request's timeout waits under in the asker's mailbox, which makes the answer and
the timeout one message: whichever enters the mailbox first is the outcome.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..writes import reply_arguments, reply_key
from .dialect import Tx
from .part import StorePart
from .rows import MSG_COLS, MessageRow, encode_sender, message_row, new_id, reply_route_of

#: What a finished message's status says to its asker.
REPLY_STATUS = {
    "completed": "completed",
    "rejected": "rejected",
    "dead": "failed",
    "cancelled": "destroyed",
    "replaced": "destroyed",
    "destroyed": "destroyed",
}

_DESTROYED = json.dumps(
    {"type": "ActorDestroyed", "message": "the target actor was destroyed before it answered"},
    sort_keys=True,
    separators=(",", ":"),
)


class ReplyStatements(StorePart):
    """``store.replies``: a request's answer, sent through ``store.mailbox``."""


    def send_reply(
        self,
        tx: Tx,
        message: MessageRow,
        *,
        status: str,
        result: str | None,
        error: str | None,
    ) -> MessageRow | None:
        """Send the outcome of request ``message`` to its asker, in ``tx``; the reply
        message when it is to be promoted now, None when there is none to send (not a
        request) or the asker already has its outcome (the timeout entered its mailbox).
        """
        route = reply_route_of(message.sender)
        if route is None or status not in REPLY_STATUS:
            return None
        asker = _asker(message)
        arguments = reply_arguments(
            route,
            status=REPLY_STATUS[status],
            target_type=message.actor_type,
            target_id=message.actor_id,
            operation=message.operation,
            result=result,
            error=error,
        )
        sender = encode_sender("actor", actor_type=message.actor_type, actor_id=message.actor_id)
        message_id = new_id()
        sent = self.store.promotion.enqueue_later(
            tx,
            message_id=message_id,
            actor_type=asker[0],
            actor_id=asker[1],
            operation=route["operation"],
            arguments=arguments,
            idempotency_key=reply_key(route["request_id"]),
            delay_ms=0,
            sender=sender,
        )
        if sent.id == message_id:
            return sent  # no timeout waits for it
        # The request's timeout is there: take it over while it is still delayed; once
        # it entered the mailbox it is the outcome, and this answer is dropped.
        taken = tx.run(
            "UPDATE {messages} SET arguments = :args, sender = :sender, available_at = {now} "
            "WHERE id = :id AND status = 'scheduled'",
            {"args": arguments, "sender": sender, "id": sent.id},
        )
        if taken != 1:
            return None
        sent.arguments, sent.sender = arguments, sender
        return sent

    def reply_destroyed(self, tx: Tx, actor_pk: int, message_ids: Sequence[str] | None) -> None:
        """Answer ``destroyed`` to the askers of the pending requests of actor
        ``actor_pk`` (of ``message_ids`` only, when given), in the transaction that marks
        them destroyed: just before, while they are still pending."""
        rows = [
            message_row(r)
            for r in tx.rows(
                f"SELECT {MSG_COLS} FROM {{messages}} WHERE actor_pk = :pk "
                "AND status IN ('scheduled', 'queued') AND sender LIKE :route",
                {"pk": actor_pk, "route": '%"reply":%'},
            )
        ]
        for message in rows:
            if message_ids is not None and message.id not in message_ids:
                continue
            if _asker(message) == (message.actor_type, message.actor_id):
                continue  # a request to itself: its asker goes with it
            self.send_reply(tx, message, status="destroyed", result=None, error=_DESTROYED)


def _asker(message: MessageRow) -> tuple[str, str]:
    doc: dict[str, Any] = json.loads(message.sender or "{}")
    return str(doc["actor_type"]), str(doc["actor_id"])
