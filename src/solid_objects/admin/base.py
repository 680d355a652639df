"""What the parts of the administration API share: the caller, paging, input checks,
audit records and the views of an actor row."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ..codec import check_identifier
from ..errors import InvalidArguments, StateMigrationError, Unauthorized
from ..store.store import new_id
from .policy import ACTIONS, Action, Policy, deny_all
from .views import ActorSummary, LeaseInfo, datetime_of, stored_json

if TYPE_CHECKING:
    from ..registry import Registry
    from ..store import Store, Tx
    from ..store.admin_rows import ActorRow

log = logging.getLogger("solid_objects.admin")

#: Most items one call may list, retry or discard.
MAX_LIMIT = 1000
#: Writes of a many-item retry or discard are committed this many at a time.
BATCH = 100
_MAX_REASON = 1000

R = TypeVar("R")


def in_batches(store: Store, ids: Sequence[str], each: Callable[[Tx, str], R]) -> list[R]:
    """``each(tx, id)`` for every id, :data:`BATCH` ids per transaction: one that raises
    rolls its whole batch back (the batches before it stay committed)."""
    results: list[R] = []
    for start in range(0, len(ids), BATCH):
        batch = ids[start : start + BATCH]

        def body(tx: Tx, batch: Sequence[str] = batch) -> list[R]:
            return [each(tx, one) for one in batch]

        results.extend(store.transact(body))
    return results


def page_of(
    rows: list[R], limit: int, kind: str, key: Callable[[R], Any]
) -> tuple[list[R], str | None]:
    """Trim a ``limit + 1`` read to ``limit`` rows; the cursor of the next page, if any."""
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    return rows, encode_cursor(kind, key(rows[-1]))


def encode_cursor(kind: str, value: Any) -> str:
    """An opaque paging cursor: ``kind`` (which listing) and the last row's key."""
    raw = json.dumps([kind, value], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None, kind: str) -> Any:
    """The key a cursor of listing ``kind`` holds (None for the first page); a cursor
    that is malformed or of another listing raises ``InvalidArguments``."""
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


def cursor_pair(value: Any) -> tuple[int, str]:
    """A decoded ``(number, text)`` cursor key, checked."""
    if not (isinstance(value, list) and len(value) == 2):
        raise InvalidArguments("not a valid cursor")
    return int(value[0]), str(value[1])


def check_limit(limit: int) -> int:
    """A page size from 1 to ``MAX_LIMIT``, or ``InvalidArguments``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidArguments(f"limit must be an int from 1 to {MAX_LIMIT}, not {limit!r}")
    return limit


def check_ids(ids: Sequence[str] | str, what: str) -> list[str]:
    """The distinct ids of a batch action (one id or many), at most ``MAX_LIMIT``."""
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


def check_filters(**filters: str | None) -> None:
    """Listing filters are identifiers too: a bad one is ``InvalidArguments``, not a crash."""
    for what, value in filters.items():
        if value is not None:
            check_identifier(value, what=what.replace("_", " "))


def check_reason(reason: str | None) -> str | None:
    """An audit reason: None or a string of bounded length."""
    if reason is not None and (not isinstance(reason, str) or len(reason) > _MAX_REASON):
        raise InvalidArguments(f"reason must be a str of at most {_MAX_REASON} characters")
    return reason


@dataclass
class SharedPolicy:
    """What every view of one runtime's API shares: the policy, and whether the
    admin tables were checked."""

    policy: Policy = deny_all
    tables_checked: bool = False


class Listings:
    """Where the administration API's listings read: the replica (``replica_url``) while
    ``replica_for_admin`` is on and the replica is within ``replica_max_lag``, the
    primary otherwise. Actions, and the single-item reads an action follows, never read
    here: they read the primary, so they act on its rows whatever a listing showed."""

    def __init__(self, store: Store, use_replica: bool) -> None:
        self._store = store
        self._replica = store.replica if use_replica else None

    @contextmanager
    def read(self) -> Iterator[tuple[Tx, float | None]]:
        """A read, and at most how many ms behind the primary it is (None: the primary's)."""
        if self._replica is None:
            with self._store.read() as tx:
                yield tx, None
            return
        with self._replica.read_measured() as (tx, behind):
            yield tx, None if behind is None else round(behind * 1000, 1)


class Caller:
    """Who asks through one view of the administration API, and whether the policy
    shared by every view lets them.

    Each part of :class:`~solid_objects.admin.Administration` authorizes through the
    caller of its view before it touches the database.
    """

    def __init__(
        self, shared: SharedPolicy, principal: str | None, ensure_schema: Callable[[], None]
    ) -> None:
        self.shared = shared
        self.principal = (
            None if principal is None else check_identifier(principal, what="principal")
        )
        self._ensure_schema = ensure_schema

    def set_policy(self, policy: Policy) -> None:
        """Install the application's policy (``policy(action) -> bool``) for every view."""
        if not callable(policy):
            raise TypeError(f"a policy is a callable taking an Action, not {policy!r}")
        self.shared.policy = policy

    def allowed(self, name: str, /, **target: Any) -> bool:
        """Whether the policy allows this principal the action, without calling it."""
        if self.principal is None:
            return False
        return self._ask(Action(self.principal, name, target)) is None

    def _ask(self, action: Action) -> str | None:
        """None when allowed; otherwise why not. A policy that raises denies."""
        policy = self.shared.policy
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

    def authorize(self, name: str, /, **target: Any) -> str:
        """The principal, when the policy allows it ``name`` on ``target``; else Unauthorized."""
        assert name in ACTIONS, name
        if self.principal is None:
            raise Unauthorized(
                f"{name}: no principal: call runtime.admin.as_principal(name) and use "
                "the view it returns"
            )
        reason = self._ask(Action(self.principal, name, target))
        if reason is not None:
            log.info(
                "denied %s to %s",
                name,
                self.principal,
                extra={"solid_action": "admin_denied", "principal": self.principal},
            )
            raise Unauthorized(f"{self.principal} may not {name}: {reason}")
        if not self.shared.tables_checked:
            self._ensure_schema()  # schema version 3 carries the admin tables
            self.shared.tables_checked = True
        return self.principal


def audit(
    store: Store,
    tx: Tx,
    principal: str,
    action: str,
    kind: str,
    target: str,
    *,
    actor: tuple[str, str] | None = None,
    detail: dict[str, Any] | None = None,
) -> None:
    """Write the audit record of a change, in the transaction that makes it."""
    store.admin.write_audit(
        tx,
        audit_id=new_id(),
        principal=principal,
        action=action,
        target_kind=kind,
        target_id=target[:255],
        actor_type=None if actor is None else actor[0],
        actor_id=None if actor is None else actor[1],
        detail=detail,
    )


def state_as_seen(registry: Registry, actor_type: str, text: str | None, version: int) -> Any:
    """Stored state as actor code of this process sees it: migrated to the class's
    ``state_version`` (what ``snapshot()`` shows); None when nothing was committed.

    UnknownActorType when the type is not registered here, StateMigrationError when
    the migration fails: showing the stored JSON instead would present state of an
    older version as if it were current.
    """
    definition = registry.get(actor_type)
    if text is None:
        return None
    state = definition.load_state(text, version)
    return definition.state.dump_python(state, mode="json")


def state_or_stored(
    registry: Registry, actor_type: str, text: str | None, version: int
) -> tuple[Any, bool]:
    """``state_as_seen`` and True, or the stored JSON and False when it cannot be."""
    try:
        return state_as_seen(registry, actor_type, text, version), True
    except (LookupError, StateMigrationError):
        return stored_json(text), False


def lease_of(row: ActorRow, now: int) -> LeaseInfo | None:
    """The actor's lease as the API shows it; None when no process holds one."""
    if row.lease_owner is None:
        return None
    expires = row.lease_expires_at
    return LeaseInfo(
        row.lease_owner,
        row.lease_generation,
        datetime_of(expires),
        expires is None or expires <= now,
    )


def retry_at_of(row: ActorRow, now: int) -> datetime | None:
    """When the actor's failed head message runs again; None when it is not backing off."""
    backing_off = row.ready_at is not None and row.ready_at > now
    return datetime_of(row.ready_at) if backing_off and row.next_seq > row.done_seq + 1 else None


def summary_of(row: ActorRow, now: int) -> ActorSummary:
    """One line of an actor listing."""
    return ActorSummary(
        actor_type=row.actor_type,
        actor_id=row.actor_id,
        queued=row.next_seq - row.done_seq - 1,
        attempt=row.attempt,
        retry_at=retry_at_of(row, now),
        paused=row.paused,
        lease=lease_of(row, now),
        updated_at=datetime_of(row.updated_at),
    )
