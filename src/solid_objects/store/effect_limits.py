"""SQL of effect flow control: a rate and a concurrency limit per effect name.

One row per limited name in ``effect_limits`` holds the limits in force and the
database-clock times of the latest starts (at most the rate's count of them). A claim
of effects locks the rows of their names first (``FOR UPDATE``; SQLite's writer is
alone anyway), so claimers of one name on every process take turns: the check of the
limits and the claims it admits commit together, and no two processes can both pass
the last free slot. Rows are locked in name order, before any effect row, so two
claimers never wait for each other in a cycle.

- rate: at most ``rate_count`` starts in any window of ``rate_per_ms``; a start is a
  claim of an attempt (retries and takeovers count);
- concurrency: at most ``max_concurrent`` attempts whose claim is live (``running``
  and not expired: a crashed process's claim stops counting once it expires).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..flow import EffectLimits
from .dialect import Tx
from .part import StorePart

if TYPE_CHECKING:
    from .outbox import EffectRow


@dataclass(frozen=True, slots=True)
class HeldBack:
    """Why due effects of one name were not started, and when one may start."""

    #: ``rate`` or ``concurrency``.
    limit: str
    #: Milliseconds (database clock) until a start may be allowed: the oldest start
    #: leaving the window, or the soonest live claim's expiry (a finish may come first).
    wait_ms: int


@dataclass(frozen=True, slots=True)
class LimitStatus:
    """One limited effect name as the operator sees it (``doctor``, dashboard, metrics)."""

    name: str
    rate_count: int | None
    rate_per_ms: int | None
    max_concurrent: int | None
    #: Effects due now (pending, or their claim expired).
    due: int
    #: Attempts with a live claim.
    running: int
    #: Starts within the rate's window ending now.
    recent_starts: int
    #: What holds the due effects back: ``concurrency``, ``rate`` or None (nothing).
    waiting_on: str | None
    declared_by: str | None


def _in(names: Sequence[str]) -> tuple[str, dict[str, Any]]:
    placeholders = ", ".join(f":n{i}" for i in range(len(names)))
    return placeholders, {f"n{i}": n for i, n in enumerate(names)}


class EffectLimitStatements(StorePart):
    """``store.effect_limits``: the limits of effect names, and claims that keep to them
    (each claim through ``store.outbox``)."""

    def _fl(self, template: str) -> str:
        return template.replace("{effect_limits}", f"{self.prefix}effect_limits")

    def declare_effect_limits(self, tx: Tx, name: str, limits: EffectLimits, *, owner: str) -> None:
        """Put this process's limits for ``name`` in force (no limits: remove the row).

        The last process to start decides, and every process applies what the row says.
        """
        if not limits.any:
            tx.run(self._fl("DELETE FROM {effect_limits} WHERE name = :n"), {"n": name})
            return
        table = f"{self.prefix}effect_limits"
        values = {
            "n": name,
            "rc": None if limits.rate is None else limits.rate.count,
            "rp": None if limits.rate is None else limits.rate.per_ms,
            "mc": limits.max_concurrent,
            "by": owner[:64],
        }
        columns = "name, rate_count, rate_per_ms, max_concurrent, declared_by, updated_at"
        row = ":n, :rc, :rp, :mc, :by, {now}"
        if self.dialect.family == "postgresql":
            insert = f"INSERT INTO {table} ({columns}) VALUES ({row}) ON CONFLICT (name) DO NOTHING"
        elif self.dialect.family == "mysql":
            insert = f"INSERT IGNORE INTO {table} ({columns}) VALUES ({row})"
        else:
            insert = f"INSERT OR IGNORE INTO {table} ({columns}) VALUES ({row})"
        if tx.run(insert, values) == 0:
            tx.run(
                self._fl(
                    "UPDATE {effect_limits} SET rate_count = :rc, rate_per_ms = :rp, "
                    "max_concurrent = :mc, declared_by = :by, updated_at = {now} WHERE name = :n"
                ),
                values,
            )

    def claim_effects(
        self, tx: Tx, due: Sequence[EffectRow], owner: str, timeout_ms: int
    ) -> tuple[list[EffectRow], dict[str, HeldBack]]:
        """Claim what the limits of each name admit; say which names were held back.

        Names without a row claim as before (``claim_effect``), taking no lock.
        """
        names = sorted({e.name for e in due})
        if not names:
            return [], {}
        placeholders, params = _in(names)
        rows = tx.rows(
            self._fl(
                "SELECT name, rate_count, rate_per_ms, max_concurrent, recent_starts "
                f"FROM {{effect_limits}} WHERE name IN ({placeholders}) ORDER BY name"
                "{for_update}"
            ),
            params,
        )
        allowance: dict[str, int] = {}
        starts: dict[str, list[int]] = {}
        held: dict[str, HeldBack] = {}
        now = self.now(tx) if rows else 0
        for name, rate_count, rate_per_ms, max_concurrent, recent in rows:
            room: int | None = None
            if max_concurrent is not None:
                running, soonest = tx.row(
                    "SELECT COUNT(*), MIN(available_at) FROM {effects} WHERE name = :n "
                    "AND status = 'running' AND available_at > :now",
                    {"n": name, "now": now},
                ) or (0, None)
                room = int(max_concurrent) - int(running)
                if room <= 0:
                    wait = int(soonest) - now if soonest is not None else 0
                    held[name] = HeldBack("concurrency", max(wait, 1))
                    allowance[name] = 0
                    continue
            if rate_count is not None and rate_per_ms is not None:
                window = [t for t in _starts(recent) if t > now - int(rate_per_ms)]
                free = int(rate_count) - len(window)
                if free <= 0:
                    # The start that must leave the window before one more fits in it.
                    oldest = sorted(window)[len(window) - int(rate_count)]
                    held[name] = HeldBack("rate", max(oldest + int(rate_per_ms) - now, 1))
                    allowance[name] = 0
                    continue
                starts[name] = window
                room = free if room is None else min(room, free)
            if room is not None:
                allowance[name] = room
        claimed: list[EffectRow] = []
        for effect in due:
            left = allowance.get(effect.name)
            if left is not None and left <= 0:
                continue
            if not self.store.outbox.claim_effect(tx, effect, owner, timeout_ms):
                continue
            claimed.append(effect)
            if left is not None:
                allowance[effect.name] = left - 1
        counted = [e.id for e in claimed if e.name in starts]
        if counted:
            # A start is the time its claim stamped (``started_at``), read back: the very
            # value the effects table shows, never an earlier reading of the clock.
            placeholders, ids = _in(counted)
            for name, started_at in tx.rows(
                f"SELECT name, started_at FROM {{effects}} WHERE id IN ({placeholders})", ids
            ):
                starts[name].append(int(started_at))
        for name, window in starts.items():
            tx.run(
                self._fl("UPDATE {effect_limits} SET recent_starts = :s WHERE name = :n"),
                {"s": json.dumps(sorted(window)), "n": name},
            )
        return claimed, held

    def effect_limit_status(self, tx: Tx) -> list[LimitStatus]:
        """Every limited effect name: its limits, due and running counts, and what holds
        its due effects back (read from the rows, as a claim would see them now)."""
        rows = tx.rows(
            self._fl(
                "SELECT name, rate_count, rate_per_ms, max_concurrent, recent_starts, "
                "declared_by FROM {effect_limits} ORDER BY name"
            )
        )
        if not rows:
            return []
        now = self.now(tx)
        found: list[LimitStatus] = []
        for name, rate_count, rate_per_ms, max_concurrent, recent, by in rows:
            due, running = tx.row(
                "SELECT COALESCE(SUM(CASE WHEN available_at <= :now THEN 1 ELSE 0 END), 0), "
                "COALESCE(SUM(CASE WHEN status = 'running' AND available_at > :now "
                "THEN 1 ELSE 0 END), 0) FROM {effects} WHERE name = :n "
                "AND status IN ('pending', 'running')",
                {"n": name, "now": now},
            ) or (0, 0)
            window = 0
            if rate_per_ms is not None:
                window = sum(1 for t in _starts(recent) if t > now - int(rate_per_ms))
            waiting_on = None
            if int(due) > 0:
                if max_concurrent is not None and int(running) >= int(max_concurrent):
                    waiting_on = "concurrency"
                elif rate_count is not None and window >= int(rate_count):
                    waiting_on = "rate"
            found.append(
                LimitStatus(
                    name,
                    None if rate_count is None else int(rate_count),
                    None if rate_per_ms is None else int(rate_per_ms),
                    None if max_concurrent is None else int(max_concurrent),
                    int(due),
                    int(running),
                    window,
                    waiting_on,
                    by,
                )
            )
        return found


def _starts(stored: str | None) -> list[int]:
    if not stored:
        return []
    return [int(t) for t in json.loads(stored)]
