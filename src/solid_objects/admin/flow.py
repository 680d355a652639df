"""Administration of effect flow control: the limits in force and what they hold back.

A part of :class:`~solid_objects.admin.Administration`; the SQL is in
:mod:`solid_objects.store.effect_limits`. Read-only, authorized as ``effects.list``.
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


class FlowControl:
    """The administration API's view of effect flow control."""

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
