"""Solid Objects: durable virtual actors in the SQL database you already run.

Example::

    from solid_objects import Actor, Runtime, query

    class Counter(Actor):
        value: int = 0

        def add(self, n: int = 1) -> int:
            self.value += n
            return self.value

    runtime = Runtime("sqlite:///app.db")
    runtime.install()
    with runtime:
        runtime.ref(Counter, "a").add(n=2)
"""

from .actor import Actor, payload, query
from .authorization import AuthorizationRequest
from .engine.actions import CommitContext
from .engine.effects import EffectContext
from .errors import (
    ActorDestroyed,
    CallInsideTurn,
    CallTimeout,
    ForeignDatabase,
    IdempotencyConflict,
    InvalidArguments,
    LeaseLost,
    MailboxFull,
    MessageFailed,
    NonRetryableError,
    NotInTurn,
    PayloadTooLarge,
    QueryMutatedState,
    Rejected,
    ReplyFailed,
    SolidObjectsError,
    SyncInsideTransaction,
    Unauthorized,
    UnknownActorType,
    UnknownOperation,
)
from .flow import Rate
from .message import MessageInfo, Sender
from .projections import Found, FoundPage, projection
from .ref import AsyncMessageReference, AsyncRef, MessageReference, Ref
from .reminders import Reminder
from .reply import Reply
from .runtime import AsyncRuntime, Runtime

__version__ = "0.1.0"

__all__ = [
    "Actor",
    "ActorDestroyed",
    "AsyncMessageReference",
    "AsyncRef",
    "AsyncRuntime",
    "AuthorizationRequest",
    "CallInsideTurn",
    "CallTimeout",
    "CommitContext",
    "EffectContext",
    "ForeignDatabase",
    "Found",
    "FoundPage",
    "IdempotencyConflict",
    "InvalidArguments",
    "LeaseLost",
    "MailboxFull",
    "MessageFailed",
    "MessageInfo",
    "MessageReference",
    "NonRetryableError",
    "NotInTurn",
    "PayloadTooLarge",
    "QueryMutatedState",
    "Rate",
    "Ref",
    "Rejected",
    "Reminder",
    "Reply",
    "ReplyFailed",
    "Runtime",
    "Sender",
    "SolidObjectsError",
    "SyncInsideTransaction",
    "Unauthorized",
    "UnknownActorType",
    "UnknownOperation",
    "__version__",
    "payload",
    "projection",
    "query",
]
