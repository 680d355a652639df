"""What a caller may learn about a message it sent: its status, outcome and result.

:class:`SentMessages` reads a stored message for a reference only once
:class:`~.access.Access` allows it, and turns a terminal outcome into the value or the
exception the caller gets. :class:`InFlight` remembers the messages this process is
still enqueueing (or whose direct turn is still committing): not in the database yet,
but not lost either, so a read says "enqueueing" rather than "not found".
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import SQLAlchemyError

from ..codec import decode_json
from ..definition import ActorDefinition, Operation, resolve_operation
from ..errors import (
    ActorDestroyed,
    DatabaseError,
    MessageCancelled,
    MessageNotFound,
    MessagePending,
    error_from_document,
)
from ..options import Options
from ..store import Store, coalescing
from ..store.store import TERMINAL, MessageRow
from .access import Access, deny
from .outcomes import Outcome

if TYPE_CHECKING:
    from ..ref import MessageReference

log = logging.getLogger("solid_objects.client")


class InFlight:
    """Messages whose enqueue (or direct turn's commit) this process started and that
    has not ended yet, and those of them whose direct turn outlived its deadline."""

    def __init__(self) -> None:
        self._enqueueing: set[str] = set()
        self._committing_direct: set[str] = set()
        self._lock = threading.Lock()

    def start(self, message_id: str) -> None:
        self._enqueueing.add(message_id)

    def end(self, message_id: str) -> None:
        """The enqueue committed or failed; a direct commit that ran late ended."""
        with self._lock:
            self._enqueueing.discard(message_id)
            self._committing_direct.discard(message_id)

    def outlived(self, message_id: str) -> None:
        """A direct turn's commit is still open at the caller's deadline."""
        with self._lock:
            if message_id in self._enqueueing:
                self._committing_direct.add(message_id)

    def enqueueing(self, message_id: str) -> bool:
        return message_id in self._enqueueing

    def committing_direct(self, message_id: str) -> bool:
        return message_id in self._committing_direct


class SentMessages:
    """Reads of stored messages for the references that name them."""

    def __init__(self, store: Store, options: Options, access: Access, in_flight: InFlight):
        self.store = store
        self.options = options
        self.access = access
        self.in_flight = in_flight

    def outcome(self, message_id: str) -> Outcome | None:
        """The stored terminal outcome, or None while the message is pending."""
        with self.store.read() as tx:
            row = self.store.message(tx, message_id)
            if row is not None:  # a replaced one's outcome is its replacement's
                row = coalescing.final_message(tx, row)
        if row is None:
            if self.in_flight.enqueueing(message_id):
                return None
            raise MessageNotFound(f"no message {message_id!r} (never sent, or pruned)")
        if row.status not in TERMINAL:
            return None
        return Outcome(row.status, row.result, row.error)

    def poll_outcome(self, message_id: str) -> Outcome | None:
        """:meth:`outcome` for a waiting caller: a failed read is retried, not raised.

        The message is durable; a dropped connection or a restarting server must not
        turn a call that will complete into an error. The deadline still applies.
        """
        try:
            return self.outcome(message_id)
        except (DatabaseError, SQLAlchemyError) as exc:
            log.debug("reading message %s failed (%r); will retry", message_id, exc)
            return None

    def locate(
        self, definition: ActorDefinition, message_id: str, context: Any
    ) -> tuple[str, Operation, str, str]:
        """(id, operation, actor_type, actor_id) of a stored message of ``definition``'s
        type, read as :meth:`read_message` allows: what ``runtime.message()`` rebuilds
        a reference from."""
        row = self.read_message(message_id, definition.actor_type, None, None, context)
        return row.id, resolve_operation(definition, row.operation), row.actor_type, row.actor_id

    def read_message(
        self,
        message_id: str,
        actor_type: str,
        actor_id: str | None,
        operation: str | None,
        context: Any,
    ) -> MessageRow:
        """The stored message a reference names, once it is shown to be the caller's to read.

        The reference's actor type (and actor id and operation, when it claims them)
        must match the stored request, and ``authorize_message`` is asked again with
        the stored operation and arguments: holding a message id is not enough to read
        another actor's outcome. With a policy configured, a missing message is refused
        exactly like one the caller may not read, so ids cannot be probed.
        """
        with self.store.read() as tx:
            row = self.store.message(tx, message_id)
        shown = f"{message_id!r} of {actor_type}"
        matches = (
            row is not None
            and row.actor_type == actor_type
            and actor_id in (None, row.actor_id)
            and operation in (None, row.operation)
        )
        if row is None or not matches:
            guarded = self.options.authorize_message is not None
            if guarded:  # asked as for a stored message, so the time taken tells nothing
                self.access.ask_anyway(context, actor_type, actor_id, operation, message_id)
            if not guarded and (row is None or (actor_id is None and row.actor_type != actor_type)):
                raise MessageNotFound(f"no {actor_type} message {message_id!r}")
            reason = (
                "the authorize_message policy does not allow it"
                if guarded
                else "the reference does not match the stored message"
            )
            deny("message", shown, reason, actor_type)
        self.access.may_read(row, context, shown)
        return row

    def checked(self, message: MessageReference[Any]) -> MessageRow:
        """:meth:`read_message` for a reference, with the context it carries."""
        return self.read_message(
            message.id,
            message.actor_type,
            message.actor_id,
            message.operation,
            message.authorization,
        )

    def status(self, message: MessageReference[Any]) -> str:
        try:
            return self.checked(message).status
        except MessageNotFound:
            if self.in_flight.enqueueing(message.id):  # a timed-out call's enqueue, still open
                return "enqueueing"
            raise

    def cancel(self, message: MessageReference[Any]) -> bool:
        """Cancel a message that has not started (see ``Store.cancel``)."""
        self.checked(message)
        done = self.store.transact(lambda tx: self.store.mailbox.cancel(tx, message.id))
        if done is None:
            raise MessageNotFound(f"no message {message.id}")
        return done[1]

    def result(self, message: MessageReference[Any]) -> Any:
        row = self.checked(message)
        if row.status == "replaced":  # its replacement's outcome
            with self.store.read() as tx:
                final = coalescing.final_message(tx, row)
            if final is None:
                raise MessageNotFound(f"the message that replaced {message.id} was pruned")
            row = final
        outcome = Outcome(row.status, row.result, row.error) if row.status in TERMINAL else None
        if outcome is None:
            raise MessagePending(f"message {message.id} has not finished; use wait()")
        return settle(message, outcome)


def settle(message: MessageReference[Any], outcome: Outcome) -> Any:
    """The value a caller gets for a terminal outcome, or the exception it raises."""
    if outcome.status == "completed":
        return message.decode_result(outcome.result)
    if outcome.status == "cancelled":
        raise MessageCancelled(f"message {message.id} was cancelled before it ran")
    if outcome.status == "destroyed":
        raise ActorDestroyed(
            f"{message.actor_type} {message.actor_id!r} was destroyed before message "
            f"{message.id} ran"
        )
    document = decode_json(outcome.error) or {}
    raise error_from_document(message.id, document, rejected=outcome.status == "rejected")
