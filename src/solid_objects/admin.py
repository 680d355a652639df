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

from __future__ import annotations

import base64
import dataclasses
import fnmatch
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .codec import check_identifier
from .errors import InvalidArguments, SolidObjectsError, Unauthorized
from .store.admin import (
    ActorRow,
    AuditRow,
    DeadLetterRow,
    EffectAdminRow,
    MailboxRow,
    ReminderAdminRow,
    RetryOutcome,
    TypeCounts,
)
from .store.store import new_id

if TYPE_CHECKING:
    from .runtime import Runtime
    from .store import Tx

log = logging.getLogger("solid_objects.admin")

T = TypeVar("T")

#: Actions that only read.
READ_ACTIONS = frozenset(
    {
        "status",
        "actors.list",
        "actors.inspect",
        "dead_letters.list",
        "dead_letters.inspect",
        "effects.list",
        "effects.inspect",
        "audit.list",
    }
)
#: Actions that change something; each leaves an audit record.
WRITE_ACTIONS = frozenset({"dead_letters.retry", "dead_letters.discard", "effects.retry"})
ACTIONS = READ_ACTIONS | WRITE_ACTIONS

#: Most items one call may list, retry or discard.
MAX_LIMIT = 1000
#: Writes of a many-item retry or discard are committed this many at a time.
_BATCH = 100
_MAX_REASON = 1000


# --- errors -----------------------------------------------------------------------------


class NotFound(SolidObjectsError, LookupError):
    """No dead letter, message, effect or actor has this id."""


class OperationRefused(SolidObjectsError):
    """The target's current state does not allow the operation (e.g. retry a discarded letter)."""


# --- authorization ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Action:
    """One administration call, as a policy sees it."""

    principal: str
    #: ``status``, ``actors.list``, ``dead_letters.retry``... (see ``ACTIONS``).
    name: str
    #: What the call names: ids, an actor type and id, list filters.
    target: Mapping[str, Any] = field(default_factory=dict)

    @property
    def mutating(self) -> bool:
        return self.name in WRITE_ACTIONS


Policy = Callable[[Action], bool]


def deny_all(action: Action) -> bool:
    """The default policy: nothing is allowed until the application says otherwise."""
    return False


class Grants:
    """A table policy: principal patterns mapped to the actions they may take.

    Patterns are shell-style (``fnmatch``, case-sensitive): ``"cli:*"``.
    Actions are names (``"dead_letters.retry"``), patterns (``"dead_letters.*"``),
    ``"read"`` (every action that only reads) or ``"*"`` (everything).
    """

    def __init__(self, grants: Mapping[str, str | Iterable[str]]) -> None:
        self._grants: list[tuple[str, tuple[str, ...]]] = []
        for principal, actions in grants.items():
            names = (actions,) if isinstance(actions, str) else tuple(actions)
            for name in names:
                if name not in ("read", "*") and not fnmatch.filter(ACTIONS, name):
                    raise ValueError(
                        f"{name!r} matches no administration action; known: "
                        f"'read', '*', {sorted(ACTIONS)}"
                    )
            self._grants.append((principal, names))

    def __call__(self, action: Action) -> bool:
        for principal, names in self._grants:
            if not fnmatch.fnmatchcase(action.principal, principal):
                continue
            for name in names:
                if name == "*" or (name == "read" and not action.mutating):
                    return True
                if fnmatch.fnmatchcase(action.name, name):
                    return True
        return False

    def __repr__(self) -> str:
        return f"allow({dict(self._grants)!r})"


def allow(grants: Mapping[str, str | Iterable[str]]) -> Grants:
    """A policy from a table: ``allow({"cli:*": "read", "cli:alice": "*"})``."""
    return Grants(grants)


# --- what the API returns -----------------------------------------------------------------


def _time(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def to_jsonable(value: Any) -> Any:
    """Plain JSON data for any value this module returns (datetimes as ISO 8601 UTC)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing; pass ``next_cursor`` back to get the next (None: the end)."""

    items: list[T]
    next_cursor: str | None
    #: The database clock when the page was read (for "3 s ago").
    now: datetime | None = None


@dataclass(frozen=True)
class DeadLetter:
    id: str
    actor_type: str
    actor_id: str
    operation: str
    arguments: Any
    attempts: int
    #: The stored error document: ``{"type": ..., "message": ...}``.
    error: Any
    seq: int | None
    idempotency_key: str | None
    created_at: datetime | None
    died_at: datetime | None
    #: None while open; ``retried`` or ``discarded`` once an operator handled it.
    resolution: str | None
    retry_message_id: str | None
    resolved_by: str | None
    resolved_at: datetime | None
    reason: str | None

    @classmethod
    def of(cls, row: DeadLetterRow) -> DeadLetter:
        return cls(
            id=row.id,
            actor_type=row.actor_type,
            actor_id=row.actor_id,
            operation=row.operation,
            arguments=_json(row.arguments),
            attempts=row.attempts,
            error=_json(row.error),
            seq=row.seq,
            idempotency_key=row.idempotency_key,
            created_at=_time(row.created_at),
            died_at=_time(row.completed_at),
            resolution=row.resolution,
            retry_message_id=row.retry_message_id,
            resolved_by=row.resolved_by,
            resolved_at=_time(row.resolved_at),
            reason=row.reason,
        )


@dataclass(frozen=True)
class LeaseInfo:
    #: The worker process holding the lease (``<pid>-<token>``).
    owner: str
    generation: int
    expires_at: datetime | None
    expired: bool


@dataclass(frozen=True)
class ActorSummary:
    actor_type: str
    actor_id: str
    #: Messages in the mailbox, the one running (if any) included.
    queued: int
    #: How many times the head message has been started (0: nothing started).
    attempt: int
    #: When a failing head message is retried (None: not backing off).
    retry_at: datetime | None
    paused: bool
    lease: LeaseInfo | None
    updated_at: datetime | None


@dataclass(frozen=True)
class MailboxMessage:
    id: str
    seq: int | None
    operation: str
    arguments: Any
    status: str
    #: Failed attempts recorded so far (the head's current attempt is on the actor).
    attempts: int
    #: The last error of a message being retried.
    error: Any
    idempotency_key: str | None
    #: For a delayed (``scheduled``) message, when it enters the mailbox.
    available_at: datetime | None
    created_at: datetime | None

    @classmethod
    def of(cls, row: MailboxRow) -> MailboxMessage:
        return cls(
            id=row.id,
            seq=row.seq,
            operation=row.operation,
            arguments=_json(row.arguments),
            status=row.status,
            attempts=row.attempts,
            error=_json(row.error),
            idempotency_key=row.idempotency_key,
            available_at=_time(row.available_at),
            created_at=_time(row.created_at),
        )


@dataclass(frozen=True)
class EffectInfo:
    id: str
    name: str
    actor_type: str
    actor_id: str
    #: pending | running | done | dead
    status: str
    attempts: int
    arguments: Any
    error: Any
    source_message_id: str
    claimed_by: str | None
    #: pending: when it may run; running: when the runner's claim expires.
    available_at: datetime | None
    created_at: datetime | None
    completed_at: datetime | None

    @classmethod
    def of(cls, row: EffectAdminRow) -> EffectInfo:
        return cls(
            id=row.id,
            name=row.name,
            actor_type=row.actor_type,
            actor_id=row.actor_id,
            status=row.status,
            attempts=row.attempts,
            arguments=_json(row.arguments),
            error=_json(row.error),
            source_message_id=row.source_message_id,
            claimed_by=row.claimed_by,
            available_at=_time(row.available_at),
            created_at=_time(row.created_at),
            completed_at=_time(row.completed_at),
        )


@dataclass(frozen=True)
class ReminderInfo:
    operation: str
    key: str
    arguments: Any
    due_at: datetime | None
    every_seconds: float | None
    missed: str
    version: int

    @classmethod
    def of(cls, row: ReminderAdminRow) -> ReminderInfo:
        return cls(
            operation=row.operation,
            key=row.key,
            arguments=_json(row.arguments),
            due_at=_time(row.due_at),
            every_seconds=None if row.every_ms is None else row.every_ms / 1000,
            missed=row.missed,
            version=row.version,
        )


@dataclass(frozen=True)
class ActorDetail:
    actor_type: str
    actor_id: str
    #: The incarnation (``pk``): a destroyed and re-created actor gets a new one.
    incarnation: int
    #: The committed state as stored (None: nothing committed yet).
    state: Any
    state_version: int
    created_at: datetime | None
    updated_at: datetime | None
    #: The last message that finished; the mailbox holds ``done_seq + 1 .. next_seq - 1``.
    done_seq: int
    next_seq: int
    attempt: int
    retry_at: datetime | None
    paused: bool
    lease: LeaseInfo | None
    #: Messages in the mailbox (total), and the first of them, head first.
    queued_total: int
    queued: list[MailboxMessage]
    #: Delayed messages that have not entered the mailbox yet.
    scheduled: list[MailboxMessage]
    #: Effects not done: pending, running or dead.
    effects: list[EffectInfo]
    reminders: list[ReminderInfo]
    #: Dead letters of this actor nobody has retried or discarded yet.
    open_dead_letters: int
    #: The database clock when this was read.
    now: datetime | None


@dataclass(frozen=True)
class TypeStatus:
    actor_type: str
    actors: int
    queued: int
    scheduled: int
    #: Actors whose head message failed and waits for its retry.
    retrying: int
    paused: int
    leases_held: int
    #: Leases whose owner stopped renewing them (a crashed or stopped process).
    leases_expired: int
    dead_letters: int
    effects_pending: int
    effects_running: int
    effects_dead: int
    reminders: int

    @classmethod
    def of(cls, counts: TypeCounts) -> TypeStatus:
        return cls(**{f.name: getattr(counts, f.name) for f in dataclasses.fields(cls)})


@dataclass(frozen=True)
class Status:
    now: datetime | None
    types: list[TypeStatus]
    total: TypeStatus


@dataclass(frozen=True)
class RetriedDeadLetter:
    message_id: str
    #: The new message, at the tail of the actor's mailbox.
    retry_message_id: str
    #: True when an earlier retry had already sent it: nothing new was enqueued.
    already: bool


@dataclass(frozen=True)
class DiscardedDeadLetter:
    message_id: str
    already: bool


@dataclass(frozen=True)
class RetriedEffect:
    effect_id: str
    #: The effect's status now.
    status: str
    #: True when it was not dead (already retried, running, or pending): nothing changed.
    already: bool


@dataclass(frozen=True)
class AuditEntry:
    id: str
    at: datetime | None
    principal: str
    action: str
    target_kind: str
    target_id: str
    actor_type: str | None
    actor_id: str | None
    detail: Any

    @classmethod
    def of(cls, row: AuditRow) -> AuditEntry:
        return cls(
            id=row.id,
            at=_time(row.at),
            principal=row.principal,
            action=row.action,
            target_kind=row.target_kind,
            target_id=row.target_id,
            actor_type=row.actor_type,
            actor_id=row.actor_id,
            detail=_json(row.detail),
        )


# --- cursors ----------------------------------------------------------------------------


R = TypeVar("R")


def _page(
    rows: list[R], limit: int, kind: str, key: Callable[[R], Any]
) -> tuple[list[R], str | None]:
    """Trim a ``limit + 1`` read to ``limit`` rows; the cursor of the next page, if any."""
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    return rows, _encode_cursor(kind, key(rows[-1]))


def _encode_cursor(kind: str, value: Any) -> str:
    raw = json.dumps([kind, value], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str | None, kind: str) -> Any:
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        found, value = json.loads(raw)
    except (ValueError, TypeError):
        raise InvalidArguments(f"not a valid cursor: {cursor!r}") from None
    if found != kind:
        raise InvalidArguments(f"that cursor belongs to a {found} listing, not {kind}")
    return value


def _pair(value: Any) -> tuple[int, str]:
    if not (isinstance(value, list) and len(value) == 2):
        raise InvalidArguments("not a valid cursor")
    return int(value[0]), str(value[1])


def _check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidArguments(f"limit must be an int from 1 to {MAX_LIMIT}, not {limit!r}")
    return limit


def _check_ids(ids: Sequence[str] | str, what: str) -> list[str]:
    if isinstance(ids, str):
        ids = [ids]
    unique = list(dict.fromkeys(ids))
    if not unique:
        raise InvalidArguments(f"no {what} ids given")
    if len(unique) > MAX_LIMIT:
        raise InvalidArguments(f"at most {MAX_LIMIT} {what} ids per call, not {len(unique)}")
    for value in unique:
        check_identifier(value, what=f"{what} id")
    return unique


def _check_reason(reason: str | None) -> str | None:
    if reason is not None and (not isinstance(reason, str) or len(reason) > _MAX_REASON):
        raise InvalidArguments(f"reason must be a str of at most {_MAX_REASON} characters")
    return reason


# --- the API ------------------------------------------------------------------------------


class Administration:
    """Inspect and repair a runtime's actors; ``runtime.admin``.

    ``runtime.admin`` carries the application's policy (``set_policy``) and no
    principal; ``runtime.admin.as_principal(name)`` returns a view that acts as
    ``name``. Views share the policy of the runtime, so changing it applies to
    every view at once.
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        policy: Policy = deny_all,
        principal: str | None = None,
        _root: Administration | None = None,
    ) -> None:
        self._runtime = runtime
        self._root = _root if _root is not None else self
        self._policy: Policy = policy
        self._principal = (
            None if principal is None else check_identifier(principal, what="principal")
        )
        self._tables_checked = False

    # --- authorization ------------------------------------------------------------------

    @property
    def policy(self) -> Policy:
        return self._root._policy

    def set_policy(self, policy: Policy) -> None:
        """Install the application's policy (``policy(action) -> bool``) for every view."""
        if not callable(policy):
            raise TypeError(f"a policy is a callable taking an Action, not {policy!r}")
        self._root._policy = policy

    @property
    def principal(self) -> str | None:
        return self._principal

    def as_principal(self, principal: str) -> Administration:
        """A view of this API acting as ``principal`` (who the policy and the audit see)."""
        return Administration(self._runtime, principal=principal, _root=self._root)

    def allowed(self, name: str, /, **target: Any) -> bool:
        """Whether the policy allows this principal the action, without calling it."""
        if self._principal is None:
            return False
        return self._ask(Action(self._principal, name, target)) is None

    def _ask(self, action: Action) -> str | None:
        """None when allowed; otherwise why not. A policy that raises denies."""
        policy = self.policy
        try:
            if policy(action) is True:
                return None
        except Exception as exc:
            return f"the administration policy raised {exc!r}"
        if policy is deny_all:
            return (
                "no administration policy is installed, and the default denies everything: "
                "the application grants access with runtime.admin.set_policy(...)"
            )
        return f"the administration policy {policy!r} does not allow it"

    def _authorize(self, name: str, /, **target: Any) -> str:
        assert name in ACTIONS, name
        if self._principal is None:
            raise Unauthorized(
                f"{name}: no principal: call runtime.admin.as_principal(name) and use "
                "the view it returns"
            )
        reason = self._ask(Action(self._principal, name, target))
        if reason is not None:
            log.info(
                "denied %s to %s",
                name,
                self._principal,
                extra={"solid_action": "admin_denied", "principal": self._principal},
            )
            raise Unauthorized(f"{self._principal} may not {name}: {reason}")
        self._ready()
        return self._principal

    def _ready(self) -> None:
        root = self._root
        if root._tables_checked:
            return
        self._runtime._engine.ensure_schema()  # schema version 3 carries the admin tables
        root._tables_checked = True

    # --- status -------------------------------------------------------------------------

    def status(self) -> Status:
        """Counts per actor type: messages, retries, dead letters, effects, reminders, leases."""
        self._authorize("status")
        store = self._runtime.store
        with store.read() as tx:
            now, counts = store.status_counts(tx)
        total = TypeCounts("*")
        for c in counts:
            for f in dataclasses.fields(TypeCounts):
                if f.name != "actor_type":
                    setattr(total, f.name, getattr(total, f.name) + getattr(c, f.name))
        return Status(_time(now), [TypeStatus.of(c) for c in counts], TypeStatus.of(total))

    # --- dead letters -------------------------------------------------------------------

    def list_dead_letters(
        self,
        *,
        actor_type: str | None = None,
        actor_id: str | None = None,
        operation: str | None = None,
        state: str = "open",
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[DeadLetter]:
        """Dead letters, the most recent death first.

        ``state``: ``open`` (the default: neither retried nor discarded),
        ``retried``, ``discarded`` or ``all``.
        """
        if state not in ("open", "retried", "discarded", "all"):
            raise InvalidArguments(f"state must be open, retried, discarded or all, not {state!r}")
        _check_limit(limit)
        after = _decode_cursor(cursor, "dead_letters")
        self._authorize(
            "dead_letters.list",
            actor_type=actor_type,
            actor_id=actor_id,
            operation=operation,
            state=state,
        )
        store = self._runtime.store
        with store.read() as tx:
            now = store.now(tx)
            rows = store.list_dead_letters(
                tx,
                actor_type=actor_type,
                actor_id=actor_id,
                operation=operation,
                state=state,
                after=None if after is None else _pair(after),
                limit=limit + 1,
            )
        rows, next_cursor = _page(
            rows, limit, "dead_letters", lambda last: [last.completed_at or 0, last.id]
        )
        return Page([DeadLetter.of(r) for r in rows], next_cursor, _time(now))

    def get_dead_letter(self, message_id: str) -> DeadLetter:
        """One dead letter, with its resolution if an operator handled it."""
        check_identifier(message_id, what="message id")
        self._authorize("dead_letters.inspect", message_id=message_id)
        store = self._runtime.store
        with store.read() as tx:
            row, status = store.dead_letter(tx, message_id)
        if row is None:
            raise NotFound(f"no message {message_id!r} (never sent, or pruned)")
        if status != "dead":
            raise NotFound(f"message {message_id} is {status}, not a dead letter")
        return DeadLetter.of(row)

    def retry_dead_letter(self, message_id: str, *, reason: str | None = None) -> RetriedDeadLetter:
        """Send a dead letter again; see :meth:`retry_dead_letters`."""
        return self.retry_dead_letters([message_id], reason=reason)[0]

    def retry_dead_letters(
        self, message_ids: Sequence[str], *, reason: str | None = None
    ) -> list[RetriedDeadLetter]:
        """Send each dead letter's operation and arguments again, to the tail of its mailbox.

        Idempotent: a dead letter is retried once, however often this is called
        (later calls return the first retry's message id with ``already=True``).
        Every id is checked first; if one is unknown, not dead, discarded, or its
        actor was destroyed since, :class:`NotFound` or :class:`OperationRefused`
        is raised and nothing is written. Writes commit ``_BATCH`` ids at a time,
        each with its audit record.
        """
        ids = _check_ids(message_ids, "message")
        reason = _check_reason(reason)
        principal = self._authorize("dead_letters.retry", message_ids=tuple(ids))
        store = self._runtime.store
        with store.read() as tx:
            for message_id in ids:
                self._check_retryable(tx, message_id)
        results: list[RetriedDeadLetter] = []
        for start in range(0, len(ids), _BATCH):
            batch = ids[start : start + _BATCH]

            def body(tx: Tx, batch: list[str] = batch) -> list[RetryOutcome]:
                outcomes = [
                    store.retry_dead_letter(
                        tx,
                        message_id,
                        retry_id=new_id(),
                        principal=principal,
                        reason=reason,
                        audit_id=new_id(),
                    )
                    for message_id in batch
                ]
                for outcome in outcomes:
                    self._refuse_retry(outcome)  # raising rolls the whole batch back
                return outcomes

            outcomes = store.transact(body)
            self._runtime._pool.route([o.enqueued for o in outcomes if o.enqueued is not None])
            for o in outcomes:
                assert o.retry_message_id is not None
                results.append(
                    RetriedDeadLetter(o.message_id, o.retry_message_id, o.kind != "retried")
                )
                if o.kind == "retried":
                    log.info(
                        "%s retried dead letter %s as %s",
                        principal,
                        o.message_id,
                        o.retry_message_id,
                        extra={"solid_action": "dead_letter_retried", "principal": principal},
                    )
        return results

    def _check_retryable(self, tx: Tx, message_id: str) -> None:
        store = self._runtime.store
        row, status = store.dead_letter(tx, message_id)
        if row is None:
            self._refuse_retry(RetryOutcome("missing", message_id))
        elif status != "dead":
            self._refuse_retry(RetryOutcome("not_dead", message_id, status=status))
        elif row.resolution == "discarded":
            self._refuse_retry(RetryOutcome("discarded", message_id))

    @staticmethod
    def _refuse_retry(outcome: RetryOutcome) -> None:
        mid = outcome.message_id
        if outcome.kind == "missing":
            raise NotFound(f"no message {mid!r} (never sent, or pruned)")
        if outcome.kind == "not_dead":
            raise OperationRefused(
                f"message {mid} is {outcome.status}, not a dead letter: only dead letters "
                "can be retried"
            )
        if outcome.kind == "discarded":
            raise OperationRefused(f"dead letter {mid} was discarded; it cannot be retried")
        if outcome.kind == "actor_gone":
            raise OperationRefused(
                f"the actor incarnation of dead letter {mid} was destroyed since; "
                "retrying it would send it to a new, empty actor"
            )

    def discard_dead_letter(
        self, message_id: str, *, reason: str | None = None
    ) -> DiscardedDeadLetter:
        return self.discard_dead_letters([message_id], reason=reason)[0]

    def discard_dead_letters(
        self, message_ids: Sequence[str], *, reason: str | None = None
    ) -> list[DiscardedDeadLetter]:
        """Mark dead letters discarded: they no longer list as open. Idempotent.

        The message rows stay as they are (``dead``), so a caller holding a
        reference still reads its failure. A dead letter that was already retried
        cannot be discarded (:class:`OperationRefused`); nothing is written then.
        """
        ids = _check_ids(message_ids, "message")
        reason = _check_reason(reason)
        principal = self._authorize("dead_letters.discard", message_ids=tuple(ids))
        store = self._runtime.store
        results: list[DiscardedDeadLetter] = []
        for start in range(0, len(ids), _BATCH):
            batch = ids[start : start + _BATCH]

            def body(tx: Tx, batch: list[str] = batch) -> list[DiscardedDeadLetter]:
                done = []
                for message_id in batch:
                    o = store.discard_dead_letter(
                        tx, message_id, principal=principal, reason=reason, audit_id=new_id()
                    )
                    if o.kind == "missing":
                        raise NotFound(f"no message {message_id!r} (never sent, or pruned)")
                    if o.kind == "not_dead":
                        raise OperationRefused(
                            f"message {message_id} is {o.status}, not a dead letter"
                        )
                    if o.kind == "retried":
                        raise OperationRefused(
                            f"dead letter {message_id} was already retried as "
                            f"{o.retry_message_id}; it cannot be discarded"
                        )
                    done.append(DiscardedDeadLetter(message_id, o.kind != "discarded"))
                return done

            results.extend(store.transact(body))
        return results

    # --- actors -------------------------------------------------------------------------

    def list_actors(
        self, actor_type: str, *, limit: int = 50, cursor: str | None = None
    ) -> Page[ActorSummary]:
        """Actors of one type, by id."""
        check_identifier(actor_type, what="actor type")
        _check_limit(limit)
        after = _decode_cursor(cursor, "actors")
        self._authorize("actors.list", actor_type=actor_type)
        store = self._runtime.store
        with store.read() as tx:
            now = store.now(tx)
            rows = store.list_actors(
                tx, actor_type, after=None if after is None else str(after), limit=limit + 1
            )
        rows, next_cursor = _page(rows, limit, "actors", lambda last: last.actor_id)
        return Page([self._summary(r, now) for r in rows], next_cursor, _time(now))

    @staticmethod
    def _lease(row: ActorRow, now: int) -> LeaseInfo | None:
        if row.lease_owner is None:
            return None
        expires = row.lease_expires_at
        return LeaseInfo(
            row.lease_owner, row.lease_generation, _time(expires), expires is None or expires <= now
        )

    @staticmethod
    def _retry_at(row: ActorRow, now: int) -> datetime | None:
        backing_off = row.ready_at is not None and row.ready_at > now
        return _time(row.ready_at) if backing_off and row.next_seq > row.done_seq + 1 else None

    def _summary(self, row: ActorRow, now: int) -> ActorSummary:
        return ActorSummary(
            actor_type=row.actor_type,
            actor_id=row.actor_id,
            queued=row.next_seq - row.done_seq - 1,
            attempt=row.attempt,
            retry_at=self._retry_at(row, now),
            paused=row.paused,
            lease=self._lease(row, now),
            updated_at=_time(row.updated_at),
        )

    def inspect_actor(self, actor_type: str, actor_id: str, *, limit: int = 50) -> ActorDetail:
        """Committed state, mailbox, lease, unfinished effects and reminders of one actor.

        ``limit`` bounds each list (queued and scheduled messages, effects, reminders).
        """
        check_identifier(actor_type, what="actor type")
        check_identifier(actor_id, what="actor id")
        _check_limit(limit)
        self._authorize("actors.inspect", actor_type=actor_type, actor_id=actor_id)
        store = self._runtime.store
        with store.read() as tx:
            now = store.now(tx)
            row = store.actor_row(tx, actor_type, actor_id)
            if row is None:
                raise NotFound(f"no actor {actor_type} {actor_id!r} (never called, or destroyed)")
            queued = store.mailbox(tx, row, limit)
            scheduled = store.scheduled_of(tx, row.pk, limit)
            effects = store.unfinished_effects_of(tx, row.pk, limit)
            reminders = store.reminders_of(tx, row.pk, limit)
            dead = store.open_dead_letters_of(tx, actor_type, actor_id)
        return ActorDetail(
            actor_type=row.actor_type,
            actor_id=row.actor_id,
            incarnation=row.pk,
            state=_json(row.state),
            state_version=row.state_version,
            created_at=_time(row.created_at),
            updated_at=_time(row.updated_at),
            done_seq=row.done_seq,
            next_seq=row.next_seq,
            attempt=row.attempt,
            retry_at=self._retry_at(row, now),
            paused=row.paused,
            lease=self._lease(row, now),
            queued_total=row.next_seq - row.done_seq - 1,
            queued=[MailboxMessage.of(m) for m in queued],
            scheduled=[MailboxMessage.of(m) for m in scheduled],
            effects=[EffectInfo.of(e) for e in effects],
            reminders=[ReminderInfo.of(r) for r in reminders],
            open_dead_letters=dead,
            now=_time(now),
        )

    # --- effects ------------------------------------------------------------------------

    def list_effects(
        self,
        *,
        status: str = "dead",
        actor_type: str | None = None,
        name: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[EffectInfo]:
        """Effects of one status (``dead`` by default), newest first."""
        if status not in ("pending", "running", "done", "dead"):
            raise InvalidArguments(f"status must be pending, running, done or dead, not {status!r}")
        _check_limit(limit)
        after = _decode_cursor(cursor, "effects")
        self._authorize("effects.list", status=status, actor_type=actor_type, name=name)
        store = self._runtime.store
        with store.read() as tx:
            now = store.now(tx)
            rows = store.list_effects(
                tx,
                status=status,
                actor_type=actor_type,
                name=name,
                after=None if after is None else _pair(after),
                limit=limit + 1,
            )
        finished = status in ("dead", "done")
        rows, next_cursor = _page(
            rows,
            limit,
            "effects",
            lambda last: [(last.completed_at if finished else last.created_at) or 0, last.id],
        )
        return Page([EffectInfo.of(r) for r in rows], next_cursor, _time(now))

    def get_effect(self, effect_id: str) -> EffectInfo:
        check_identifier(effect_id, what="effect id")
        self._authorize("effects.inspect", effect_id=effect_id)
        store = self._runtime.store
        with store.read() as tx:
            row = store.effect(tx, effect_id)
        if row is None:
            raise NotFound(f"no effect {effect_id!r}")
        return EffectInfo.of(row)

    def retry_effect(self, effect_id: str, *, reason: str | None = None) -> RetriedEffect:
        return self.retry_effects([effect_id], reason=reason)[0]

    def retry_effects(
        self, effect_ids: Sequence[str], *, reason: str | None = None
    ) -> list[RetriedEffect]:
        """Put dead effects back to pending with their attempts reset.

        The handler runs again with the same ``ctx.id``. Idempotent: an effect that
        is no longer dead (pending, running) is left alone (``already=True``); a
        ``done`` effect is refused, as is an unknown id, and nothing is written then.
        """
        ids = _check_ids(effect_ids, "effect")
        reason = _check_reason(reason)
        principal = self._authorize("effects.retry", effect_ids=tuple(ids))
        store = self._runtime.store
        results: list[RetriedEffect] = []
        for start in range(0, len(ids), _BATCH):
            batch = ids[start : start + _BATCH]

            def body(tx: Tx, batch: list[str] = batch) -> list[RetriedEffect]:
                done = []
                for effect_id in batch:
                    o = store.retry_effect(
                        tx, effect_id, principal=principal, reason=reason, audit_id=new_id()
                    )
                    if o.kind == "missing":
                        raise NotFound(f"no effect {effect_id!r}")
                    if o.kind == "not_dead" and o.status == "done":
                        raise OperationRefused(
                            f"effect {effect_id} is done; only dead effects can be retried"
                        )
                    done.append(
                        RetriedEffect(effect_id, o.status or "pending", o.kind != "retried")
                    )
                return done

            results.extend(store.transact(body))
        self._runtime._pool.poller.wake()
        return results

    # --- audit --------------------------------------------------------------------------

    def audit_log(
        self,
        *,
        target_id: str | None = None,
        principal: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[AuditEntry]:
        """Audit records of changes made through this API, newest first."""
        _check_limit(limit)
        after = _decode_cursor(cursor, "audit")
        self._authorize("audit.list", target_id=target_id, principal=principal)
        store = self._runtime.store
        with store.read() as tx:
            now = store.now(tx)
            rows = store.list_audit(
                tx,
                target_id=target_id,
                principal=principal,
                after=None if after is None else str(after),
                limit=limit + 1,
            )
        rows, next_cursor = _page(rows, limit, "audit", lambda last: last.id)
        return Page([AuditEntry.of(r) for r in rows], next_cursor, _time(now))
