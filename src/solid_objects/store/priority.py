"""SQL of message priority: which ready actors are claimed first.

An actor's *claim rank* is the highest ``priority`` among its queued messages (0 when
it has none above 0). :func:`ready_in_rank_order` reads the ready actors with a rank
above 0 first, highest rank first, then the others by ``ready_at`` as before, in one
statement: the urgent half is served by the partial index ``messages_urgent`` (only
messages with a priority above 0 have an entry), so a database with no urgent message
pays one empty index probe per poll round.

Inside one actor nothing is reordered: the mailbox stays a strict sequence, so an
urgent message waits for the messages queued before it in its own actor, and it makes
the whole actor (those messages included) be claimed before actors with no urgent
message (docs/actors.md, "Priority and coalescing").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .dialect import Tx

#: The lowest and highest priority a message may carry; 0 is every plain message's.
LOWEST, HIGHEST = 0, 9

#: The urgent messages still queued, per actor: its rank.
_RANKS = (
    "SELECT actor_pk, MAX(priority) AS rank_ FROM {messages} "
    "WHERE priority > 0 AND status = 'queued' GROUP BY actor_pk"
)


def ready_in_rank_order(
    tx: Tx, columns: str, where: str, params: dict[str, Any], limit: int
) -> list[Sequence[Any]]:
    """Up to ``limit`` rows of ``columns`` of the actors matching ``where``: those with
    a claim rank above 0 first (highest first, then by ``ready_at``), then the rest
    by ``ready_at``. ``columns`` are the actors table's; its primary key comes first.
    Each row ends with the actor's ``ready_at`` and its rank, after ``columns``."""
    urgent = (
        f"SELECT {columns}, ready_at AS ready_, r.rank_ AS rank_ FROM {{actors}} "
        f"JOIN ({_RANKS}) r ON r.actor_pk = pk WHERE {where} "
        "ORDER BY r.rank_ DESC, ready_at LIMIT :urgent_limit"
    )
    plain = (
        f"SELECT {columns}, ready_at AS ready_, 0 AS rank_ FROM {{actors}} WHERE {where} "
        "ORDER BY ready_at LIMIT :limit"
    )
    rows = tx.rows(
        f"SELECT * FROM ({urgent}) u UNION ALL SELECT * FROM ({plain}) p",
        {**params, "limit": limit, "urgent_limit": limit},
    )
    # An urgent actor is in both parts: its ranked row sorts first and is kept.
    rows.sort(key=lambda row: (-int(row[-1]), int(row[-2])))
    seen: set[int] = set()
    ordered: list[Sequence[Any]] = []
    for row in rows:
        if int(row[0]) not in seen:
            seen.add(int(row[0]))
            ordered.append(row)
    return ordered[:limit]


def urgent_queued(tx: Tx) -> dict[tuple[str, int], int]:
    """Queued messages with a priority above 0, per (actor type, priority): the partial
    index answers it."""
    rows = tx.rows(
        "SELECT actor_type, priority, COUNT(*) FROM {messages} "
        "WHERE priority > 0 AND status = 'queued' GROUP BY actor_type, priority"
    )
    return {(str(r[0]), int(r[1])): int(r[2]) for r in rows}
