"""The administration API: ``runtime.admin``.

Operators (a dashboard, the ``solid-objects`` command line, a script) inspect
actors, dead letters and effects, and repair what is stuck, through one
object. Every call is authorized by a *policy* that the application installs;
the default policy denies everything::

    from solid_objects.admin import allow

    runtime.admin.set_policy(allow({"cli:*": "read", "cli:alice": "*"}))

    ops = runtime.admin.as_principal("cli:alice")   # who is asking
    for letter in ops.list_dead_letters(actor_type="Account").items:
        print(letter.id, letter.error)
    ops.retry_dead_letter(letter.id)

A policy is any callable ``policy(action) -> bool``; :class:`Action` says who
(``principal``), what (``name``, e.g. ``"dead_letters.retry"``, and whether it
``mutating``) and on which ``target``. A refused call raises
:class:`~solid_objects.errors.Unauthorized` before touching the database.
Every change is written with an audit record (who, what, when, which target)
in the same transaction.
"""

from ..errors import NotFound, OperationRefused
from .api import Administration
from .history import ForkedActor, JournalEntry
from .policy import ACTIONS, READ_ACTIONS, WRITE_ACTIONS, Action, Grants, Policy, allow, deny_all
from .views import (
    Activity,
    ActivityBucket,
    ActorDetail,
    ActorMessage,
    ActorPause,
    ActorSummary,
    AuditEntry,
    DeadLetter,
    DiscardedDeadLetter,
    EffectInfo,
    ExpiryReport,
    LeaseInfo,
    MailboxMessage,
    Orphans,
    Page,
    ProcessInfo,
    PruneReport,
    RecoveredProcess,
    ReminderChange,
    ReminderInfo,
    RetriedDeadLetter,
    RetriedEffect,
    Status,
    TypeStatus,
    to_jsonable,
)

__all__ = [
    "ACTIONS",
    "READ_ACTIONS",
    "WRITE_ACTIONS",
    "Action",
    "Activity",
    "ActivityBucket",
    "ActorDetail",
    "ActorMessage",
    "ActorPause",
    "ActorSummary",
    "Administration",
    "AuditEntry",
    "DeadLetter",
    "DiscardedDeadLetter",
    "EffectInfo",
    "ExpiryReport",
    "ForkedActor",
    "Grants",
    "JournalEntry",
    "LeaseInfo",
    "MailboxMessage",
    "NotFound",
    "OperationRefused",
    "Orphans",
    "Page",
    "Policy",
    "ProcessInfo",
    "PruneReport",
    "RecoveredProcess",
    "ReminderChange",
    "ReminderInfo",
    "RetriedDeadLetter",
    "RetriedEffect",
    "Status",
    "TypeStatus",
    "allow",
    "deny_all",
    "to_jsonable",
]
