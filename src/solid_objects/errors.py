"""Every error the library raises.

All of them derive from :class:`SolidObjectsError`. Errors that describe bad
input also derive from :class:`ValueError` or :class:`TypeError`, so generic
handlers keep working. Errors that cross the database (a turn failed in a
worker, the caller reads it later) are stored as a small JSON document and
rebuilt by :func:`error_from_document`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .ref import MessageReference


class SolidObjectsError(Exception):
    """Base class of every error raised by Solid Objects."""


# --- definition and configuration -------------------------------------------------------


class InvalidActorDefinition(SolidObjectsError, TypeError):
    """An actor class cannot be used: reserved name, bad signature, missing default..."""


class ConfigurationError(SolidObjectsError, ValueError):
    """A runtime option or database URL is not valid."""


class ForeignDatabase(ConfigurationError):
    """A connection given to ``with_options(connection=...)`` is to another database.

    The message would commit where no worker looks for it (or not at all): the
    application's transaction must be on the runtime's own database and schema.
    """


class SchemaNotInstalled(SolidObjectsError):
    """The database has no Solid Objects tables, or an older version of them."""


class SchemaTooNew(SolidObjectsError):
    """The database was installed by a newer version of Solid Objects."""


class DatabaseError(SolidObjectsError):
    """The database driver failed; ``orig`` is the driver's exception."""

    def __init__(
        self,
        message: str,
        orig: BaseException | None = None,
        *,
        disconnect: bool = False,
        commit_unknown: bool = False,
    ) -> None:
        super().__init__(message)
        self.orig = orig
        #: The connection was lost (it has been discarded from the pool).
        self.disconnect = disconnect
        #: The failure came from COMMIT itself: the transaction may have committed.
        self.commit_unknown = commit_unknown


class RuntimeNotStarted(SolidObjectsError):
    """A call waits for a result but this runtime runs no workers."""


class RuntimeClosed(RuntimeNotStarted):
    """A call waits for a result but this runtime was closed (start it again to call)."""


# --- bad input: refused before anything is written --------------------------------------


class InvalidArguments(SolidObjectsError, ValueError):
    """Arguments do not match the operation's signature or are not JSON."""


class InvalidActorId(InvalidArguments):
    """An actor id is empty, too long, not a string, or holds control characters."""


class PayloadTooLarge(InvalidArguments):
    """Arguments, a result or a state document exceed the configured size limit."""


class UnknownActorType(SolidObjectsError, LookupError):
    """No actor class is registered under this type name."""


class UnknownOperation(SolidObjectsError, AttributeError):
    """The actor has no public operation (or query) with this name."""


class IdempotencyConflict(SolidObjectsError):
    """An idempotency key was reused for different arguments or a different operation.

    Its text shows the stored call only to a caller who may read that message (the
    ``authorize_message`` policy, asked as for ``runtime.message(id)``); anyone else
    gets :class:`Unauthorized` instead, which says nothing of it.
    """

    def __init__(self, *args: object, existing: Any = None) -> None:
        super().__init__(*args)
        #: The stored message, for the client's read check; None once it is raised
        #: to the caller.
        self.existing = existing


class MailboxFull(SolidObjectsError):
    """The actor already has ``max_mailbox_length`` queued messages; nothing was written.

    Backpressure: the caller may retry later. HTTP integrations answer 429.
    """


class Unauthorized(SolidObjectsError):
    """The application's policy refused this call."""


class NotFound(SolidObjectsError, LookupError):
    """No dead letter, message, effect, reminder, process or actor has this id."""


class OperationRefused(SolidObjectsError):
    """The target's current state does not allow the operation (e.g. retry a discarded letter)."""


class ApplicationWriteForbidden(SolidObjectsError):
    """Actor code used the runtime's engine directly; stage a commit action instead."""


class NotInTurn(SolidObjectsError):
    """``emit``/``schedule``/``send_to`` was called outside an operation (e.g. in a query)."""


class CallInsideTurn(SolidObjectsError):
    """Actor code called another actor directly; stage it with ``self.send_to`` instead."""


class SyncInsideTransaction(SolidObjectsError):
    """A call or send from a thread that holds an uncommitted write transaction on the
    same SQLite database: the library's commit would wait for that thread's lock."""


# --- outcomes of a call ------------------------------------------------------------------


#: A rejection code: a letter or underscore, then up to 63 letters, digits or ``_.:-``.
REJECTION_CODE = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}")


class InvalidRejectionCode(SolidObjectsError, ValueError):
    """``Rejected(code)`` was given a code that is not a short machine-readable token.

    Raised where ``Rejected`` is constructed, so the traceback points at the line
    that wrote the bad code; raised inside a turn it dead-letters the message at once.
    """


class NonRetryableError(SolidObjectsError):
    """Subclass it to mark an application error as deterministic.

    A turn that raises one is not retried: the message becomes a dead letter at
    once (unlike :class:`Rejected`, which is an answer, this is a failure).
    """


class Rejected(SolidObjectsError):
    """A deterministic refusal raised by actor code: not retried, state unchanged.

    ``code`` is a short machine-readable reason (see :data:`REJECTION_CODE`),
    ``message`` is for people, and ``details`` is any JSON value.
    """

    def __init__(self, code: str, message: str = "", details: Any = None) -> None:
        if not isinstance(code, str) or REJECTION_CODE.fullmatch(code) is None:
            raise InvalidRejectionCode(
                f"rejection code {code!r} must match {REJECTION_CODE.pattern} "
                "(a letter or underscore first, no spaces, at most 64 characters)"
            )
        self._fill(code, message, details)

    def _fill(self, code: str, message: str, details: Any) -> None:
        SolidObjectsError.__init__(self, f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.details = details
        self.message_id: str | None = None


class QueryMutatedState(SolidObjectsError):
    """A ``@query`` method changed the actor's state.

    A query runs on a throwaway copy and commits nothing; raising instead of
    dropping the change keeps a misplaced write from vanishing silently.
    """


class MessageFailed(SolidObjectsError):
    """The message became a dead letter; ``error`` is the stored error document."""

    def __init__(self, message_id: str, error: dict[str, Any]) -> None:
        kind = error.get("type", "Error")
        super().__init__(f"message {message_id} failed: {kind}: {error.get('message', '')}")
        self.message_id = message_id
        self.error = error


class ReplyFailed(SolidObjectsError):
    """``Reply.value()`` of a request that did not complete: rejected, failed,
    destroyed or timed out. ``reply`` is the whole :class:`~solid_objects.Reply`."""

    def __init__(self, reply: Any) -> None:
        error = reply.error or {}
        super().__init__(
            f"request {reply.request_id} to {reply.target_type} {reply.target_id!r} "
            f"{reply.status}: {error.get('code') or error.get('type', '')} "
            f"{error.get('message', '')}".rstrip()
        )
        self.reply = reply


class MessageCancelled(SolidObjectsError):
    """The message was cancelled before it ran (``MessageReference.cancel()``)."""


class MessageNotFound(SolidObjectsError, LookupError):
    """No message has this id (it never existed, or retention pruned it)."""


class MessagePending(SolidObjectsError):
    """``MessageReference.result()`` was asked before the message finished."""


class CallTimeout(SolidObjectsError, TimeoutError):
    """The call did not finish in time. The message is durable and may still run.

    ``message`` is the :class:`MessageReference` whenever the message may exist:
    stored, or written by a transaction still open at the deadline, which may commit
    after it (its ``status()`` tells); ``None`` only when nothing was written.
    ``waiting_on`` says what it waits for.
    """

    def __init__(self, waiting_on: str, message: MessageReference[Any] | None = None) -> None:
        super().__init__(waiting_on)
        self.waiting_on = waiting_on
        self.message = message


class ActorDestroyed(SolidObjectsError):
    """The actor incarnation this message belonged to was destroyed."""


class LeaseLost(SolidObjectsError):
    """A worker's activation lease was taken over or expired: its commit was refused."""


class StateMigrationError(SolidObjectsError):
    """Stored state cannot be brought to the class's ``state_version``."""


class UnhandledEffect(SolidObjectsError):
    """No live process handled the effect's name for ``unhandled_effect_timeout``: the
    effect is dead without having run (the error its ``on_failure`` callback gets)."""


class EffectTimedOut(SolidObjectsError, TimeoutError):
    """An effect attempt ran past its handler's ``max_duration``
    (``@runtime.effect(name, max_duration=...)``), or lost its claim: the attempt
    failed and is retried like any failed attempt. ``ctx.heartbeat()`` raises it so a
    handler that checks in stops early; one that does not is not interrupted, but its
    outcome is no longer recorded."""


class InvalidState(SolidObjectsError, ValueError):
    """After a turn the actor's public attributes do not match their annotations."""


_STORED: dict[str, type[SolidObjectsError]] = {
    cls.__name__: cls
    for cls in (
        InvalidArguments,
        InvalidActorId,
        PayloadTooLarge,
        UnknownActorType,
        UnknownOperation,
        StateMigrationError,
        InvalidState,
        NotInTurn,
        CallInsideTurn,
        ApplicationWriteForbidden,
        InvalidRejectionCode,
    )
}

#: Errors that no retry can fix: the message fails at once.
DETERMINISTIC: tuple[type[BaseException], ...] = (*_STORED.values(), NonRetryableError)


def error_document(exc: BaseException) -> dict[str, Any]:
    """The JSON document stored for a failed or rejected message."""
    if isinstance(exc, Rejected):
        return {
            "type": "Rejected",
            "code": exc.code,
            "message": exc.message,
            "details": exc.details,
        }
    return {"type": type(exc).__name__, "message": str(exc)}


def error_from_document(message_id: str, document: dict[str, Any], *, rejected: bool) -> Exception:
    """Rebuild the exception a caller sees for a stored outcome."""
    if rejected:
        # A stored code is shown as it was stored, not validated again.
        err = Rejected.__new__(Rejected)
        err._fill(
            str(document.get("code", "rejected")),
            str(document.get("message", "")),
            document.get("details"),
        )
        err.message_id = message_id
        return err
    return MessageFailed(message_id, document)
