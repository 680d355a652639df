"""Administration of flow control: the limits in force and what they hold back.

Effect limits (rate and concurrency per effect name) and the per-type turn limit
(``max_active_turns``), counted from the database's rows over every process.

A part of :class:`~solid_objects.admin.Administration`; the SQL is in
:mod:`solid_objects.store.effect_limits` and :mod:`solid_objects.store.limits`. Read-only:
effect limits are authorized as ``effects.list``, turn limits (counts only) as ``status``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .base import Caller

if TYPE_CHECKING:
    from ..runtime import Runtime


@dataclass(frozen=True)
class EffectLimitInfo:
    """One effect name with flow control: its limits and what they hold back now."""

    name: str
    #: At most ``rate_count`` starts in any ``rate_per_seconds`` (None: no rate limit).
    rate_count: int | None
    rate_per_seconds: float | None
    #: At most this many attempts with a live claim at once (None: no such limit).
    max_concurrent: int | None
    #: Effects due now (pending, or their claim expired).
    due: int
    #: Attempts whose claim is live.
    running: int
    #: Starts within the rate's window ending now.
    recent_starts: int
    #: The limit that holds the due effects back: ``rate``, ``concurrency`` or None.
    waiting_on: str | None
    #: The process whose declaration is in force (the last one to start).
    declared_by: str | None


@dataclass(frozen=True)
class TurnLimitInfo:
    """One actor type with ``max_active_turns``: its limit and what it holds back now."""

    actor_type: str
    #: At most this many of the type's actors run a turn at once, over every process.
    max_active_turns: int
    #: The type's actors holding a live lease: the turns running now.
    running: int
    #: Actors with due work and no lease that wait because the type is at its limit
    #: (0 while it is not).
    waiting: int


class FlowControl:
    """The administration API's view of flow control."""

    def __init__(self, runtime: Runtime, caller: Caller) -> None:
        self._runtime = runtime
        self._authorize = caller.authorize

    def effect_limits(self) -> list[EffectLimitInfo]:
        """Every effect name with a rate or concurrency limit, by name: the limits in
        force (over every process), and how many due effects wait on which limit."""
        self._authorize("effects.list", view="limits")
        store = self._runtime.store
        with store.read() as tx:
            rows = store.effect_limits.effect_limit_status(tx)
        return [
            EffectLimitInfo(
                s.name,
                s.rate_count,
                None if s.rate_per_ms is None else s.rate_per_ms / 1000,
                s.max_concurrent,
                s.due,
                s.running,
                s.recent_starts,
                s.waiting_on,
                s.declared_by,
            )
            for s in rows
        ]

    def turn_limits(self) -> list[TurnLimitInfo]:
        """Every actor type with ``max_active_turns``, by name: its limit, the turns
        running now and the actors waiting for the limit, counted from the database's
        rows over every process. The limits are those of the classes registered in
        this process (a type it does not know is not listed)."""
        self._authorize("status", view="turn_limits")
        limits = self._runtime.registry.turn_limits()
        if not limits:
            return []
        store = self._runtime.store
        with store.read() as tx:
            held = store.limits.held_back(tx, limits)
        return [
            TurnLimitInfo(actor_type, limits[actor_type], running, waiting)
            for actor_type, (running, waiting) in held.items()
        ]
