"""Who may do what: the actions of the administration API and the policies that allow them.

A policy is any callable ``policy(action) -> bool``. The default denies
everything, so an application that never thought about access exposes nothing.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Actions that only read.
READ_ACTIONS = frozenset(
    {
        "status",
        "actors.list",
        "actors.inspect",
        "actors.history",
        "dead_letters.list",
        "dead_letters.inspect",
        "effects.list",
        "effects.inspect",
        "audit.list",
        "actors.pending",
        "actors.states",
        "actors.quiet",
        "orphans.list",
        "reminders.list",
        "processes.list",
        "retention.preview",
    }
)
#: Actions that change something; each leaves an audit record.
WRITE_ACTIONS = frozenset(
    {
        "dead_letters.retry",
        "dead_letters.discard",
        "effects.retry",
        "actors.pause",
        "actors.resume",
        "actors.destroy",
        "actors.fork",
        "actors.expire",
        "messages.cancel",
        "reminders.pause",
        "reminders.resume",
        "reminders.cancel",
        "reminders.run_now",
        "processes.recover",
        "retention.prune",
    }
)
ACTIONS = READ_ACTIONS | WRITE_ACTIONS

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
