"""The shared machinery of the administration API: authorization, paging, input checks."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Self, TypeVar

from ..codec import check_identifier
from ..errors import InvalidArguments, StateMigrationError, Unauthorized
from .policy import ACTIONS, Action, Policy, deny_all
from .views import stored_json

if TYPE_CHECKING:
    from ..runtime import Runtime

log = logging.getLogger("solid_objects.admin")

#: Most items one call may list, retry or discard.
MAX_LIMIT = 1000
#: Writes of a many-item retry or discard are committed this many at a time.
BATCH = 100
_MAX_REASON = 1000

R = TypeVar("R")


def page_of(
    rows: list[R], limit: int, kind: str, key: Callable[[R], Any]
) -> tuple[list[R], str | None]:
    """Trim a ``limit + 1`` read to ``limit`` rows; the cursor of the next page, if any."""
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    return rows, encode_cursor(kind, key(rows[-1]))


def encode_cursor(kind: str, value: Any) -> str:
    raw = json.dumps([kind, value], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None, kind: str) -> Any:
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
    if not (isinstance(value, list) and len(value) == 2):
        raise InvalidArguments("not a valid cursor")
    return int(value[0]), str(value[1])


def check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidArguments(f"limit must be an int from 1 to {MAX_LIMIT}, not {limit!r}")
    return limit


def check_ids(ids: Sequence[str] | str, what: str) -> list[str]:
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
    if reason is not None and (not isinstance(reason, str) or len(reason) > _MAX_REASON):
        raise InvalidArguments(f"reason must be a str of at most {_MAX_REASON} characters")
    return reason


class AdminBase:
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
        _root: AdminBase | None = None,
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

    def as_principal(self, principal: str) -> Self:
        """A view of this API acting as ``principal`` (who the policy and the audit see)."""
        return type(self)(self._runtime, principal=principal, _root=self._root)

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

    def _state_as_seen(self, actor_type: str, text: str | None, version: int) -> Any:
        """Stored state as actor code of this process sees it: migrated to the class's
        ``state_version`` (what ``snapshot()`` shows); None when nothing was committed.

        UnknownActorType when the type is not registered here, StateMigrationError when
        the migration fails: showing the stored JSON instead would present state of an
        older version as if it were current.
        """
        definition = self._runtime.registry.get(actor_type)
        if text is None:
            return None
        state = definition.load_state(text, version)
        return definition.state.dump_python(state, mode="json")

    def _state_or_stored(self, actor_type: str, text: str | None, version: int) -> tuple[Any, bool]:
        """``_state_as_seen`` and True, or the stored JSON and False when it cannot be."""
        try:
            return self._state_as_seen(actor_type, text, version), True
        except (LookupError, StateMigrationError):
            return stored_json(text), False

    def _ready(self) -> None:
        root = self._root
        if root._tables_checked:
            return
        self._runtime.kernel.ensure_schema()  # schema version 3 carries the admin tables
        root._tables_checked = True
