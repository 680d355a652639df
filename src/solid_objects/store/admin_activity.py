"""SQL of the administration API's history reads: activity over time, an actor's messages.

:class:`ActivityStatements` is a base of :class:`~solid_objects.store.admin.AdminStatements`
(so of ``Store``); it reads only, on ``Store.read()`` connections.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .dialect import Tx
from .part import StorePart

#: Latencies read per ``activity`` call at most, for its percentiles.
LATENCY_SAMPLE = 10_000


@dataclass(slots=True)
class ActivityCounts:
    """One bucket of finished messages: ``start`` is the bucket's first epoch ms."""

    start: int
    completed: int = 0
    rejected: int = 0
    dead: int = 0
    #: Finished messages (any outcome) that took more than one attempt.
    retried: int = 0
    latency_sum_ms: int = 0
    latency_max_ms: int = 0


@dataclass(slots=True)
class ActorMessageRow:
    id: str
    seq: int | None
    operation: str
    arguments: str
    status: str
    attempts: int
    error: str | None
    created_at: int
    completed_at: int | None
    traceback: str | None = None


_ACTOR_MESSAGE_COLS = (
    "id, seq, operation, arguments, status, attempts, error, created_at, completed_at, traceback"
)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _actor_message(r: Sequence[Any]) -> ActorMessageRow:
    return ActorMessageRow(
        id=r[0],
        seq=_int(r[1]),
        operation=r[2],
        arguments=r[3],
        status=r[4],
        attempts=int(r[5]),
        error=r[6],
        created_at=int(r[7]),
        completed_at=_int(r[8]),
        traceback=r[9],
    )


class ActivityStatements(StorePart):
    """``store.activity``: read-only statements over finished messages."""

    def activity_counts(self, tx: Tx, *, since: int, bucket_ms: int) -> list[ActivityCounts]:
        """Finished messages per bucket of ``bucket_ms`` from ``since`` (epoch ms), oldest first.

        The bucket is computed as ``completed_at - (completed_at - since) % bucket``, plain
        integer arithmetic on all three databases (no dialect-specific division). There is
        no index on ``completed_at`` for done messages, so this scans the messages table
        (the retention window bounds it); see docs/dashboard.md.
        """
        rows = tx.rows(
            "SELECT completed_at - (completed_at - :since) % :bucket AS b, status, COUNT(*), "
            "SUM(CASE WHEN attempts > 1 THEN 1 ELSE 0 END), "
            "SUM(completed_at - created_at), MAX(completed_at - created_at) "
            "FROM {messages} WHERE status IN ('completed', 'rejected', 'dead') "
            "AND completed_at >= :since "
            "GROUP BY b, status",
            {"since": since, "bucket": bucket_ms},
        )
        buckets: dict[int, ActivityCounts] = {}
        for start, status, count, retried, latency_sum, latency_max in rows:
            c = buckets.setdefault(int(start), ActivityCounts(int(start)))
            c.retried += int(retried or 0)
            if status == "completed":
                c.completed += int(count)
                c.latency_sum_ms += int(latency_sum or 0)
                c.latency_max_ms = max(c.latency_max_ms, int(latency_max or 0))
            elif status == "rejected":
                c.rejected += int(count)
            else:
                c.dead += int(count)
        return [buckets[k] for k in sorted(buckets)]

    def latency_sample(self, tx: Tx, *, since: int, limit: int) -> list[tuple[int, int]]:
        """``(completed_at, latency ms)`` of up to ``limit`` completed messages since ``since``.

        Which rows come back, when more than ``limit`` match, is the database's choice
        (no ORDER BY: sorting would cost what the bound saves).
        """
        return [
            (int(r[0]), int(r[1]))
            for r in tx.rows(
                "SELECT completed_at, completed_at - created_at FROM {messages} "
                "WHERE status = 'completed' AND completed_at >= :since LIMIT :limit",
                {"since": since, "limit": limit},
            )
        ]

    def actor_messages(
        self, tx: Tx, actor_pk: int, *, before: int | None, limit: int
    ) -> list[ActorMessageRow]:
        """Messages of one incarnation that entered its mailbox, newest (highest seq) first.

        Served by the ``(actor_pk, seq)`` mailbox index; ``before`` is the cursor's seq.
        Delayed messages not yet promoted have no seq and are listed as scheduled instead.
        """
        where = "actor_pk = :pk AND seq IS NOT NULL"
        params: dict[str, Any] = {"pk": actor_pk, "limit": limit}
        if before is not None:
            where += " AND seq < :before"
            params["before"] = before
        return [
            _actor_message(r)
            for r in tx.rows(
                f"SELECT {_ACTOR_MESSAGE_COLS} FROM {{messages}} WHERE {where} "
                "ORDER BY seq DESC LIMIT :limit",
                params,
            )
        ]
