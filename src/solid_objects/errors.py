"""Every error the library raises.

All of them derive from :class:`SolidObjectsError`. Errors that describe bad
input also derive from :class:`ValueError` or :class:`TypeError`, so generic
handlers keep working. Errors that cross the database (a turn failed in a
worker, the caller reads it later) are stored as a small JSON document and
rebuilt by :func:`error_from_document`.
"""

from __future__ import annotations

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
    """An idempotency key was reused for different arguments or a different operation."""


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


class Rejected(SolidObjectsError):
    """A deterministic refusal raised by actor code: not retried, state unchanged.

    ``code`` is a short machine-readable reason, ``message`` is for people, and
    ``details`` is any JSON value.
    """

    def __init__(self, code: str, message: str = "", details: Any = None) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.details = details
        self.message_id: str | None = None


class MessageFailed(SolidObjectsError):
    """The message became a dead letter; ``error`` is the stored error document."""

    def __init__(self, message_id: str, error: dict[str, Any]) -> None:
        kind = error.get("type", "Error")
        super().__init__(f"message {message_id} failed: {kind}: {error.get('message', '')}")
        self.message_id = message_id
        self.error = error


class MessageNotFound(SolidObjectsError, LookupError):
    """No message has this id (it never existed, or retention pruned it)."""


class MessagePending(SolidObjectsError):
    """``MessageReference.result()`` was asked before the message finished."""


class CallTimeout(SolidObjectsError, TimeoutError):
    """The call did not finish in time. The message is durable and may still run.

    ``message`` is the :class:`MessageReference` (``None`` if the timeout hit
    before the enqueue committed) and ``waiting_on`` says what it waits for.
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
    )
}

#: Errors that no retry can fix: the message fails at once.
DETERMINISTIC: tuple[type[BaseException], ...] = tuple(_STORED.values())


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
        err = Rejected(
            str(document.get("code", "rejected")),
            str(document.get("message", "")),
            document.get("details"),
        )
        err.message_id = message_id
        return err
    return MessageFailed(message_id, document)
