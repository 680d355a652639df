"""SQL of message priority: which ready actors are claimed first.

An actor's *claim rank* is the priority of its head message (the next one to run,
``done_seq + 1``), 0 for a plain one. :func:`ready_in_rank_order` reads the ready
actors whose head has a rank above 0 first, highest rank first, then the others by
``ready_at`` as before. The ranked half starts from the partial index
``messages_urgent`` (only messages with a priority above 0 have an entry) and looks
each one's actor up by primary key (``CROSS JOIN`` keeps SQLite's planner, which has
no statistics, in that order); it is read only while an urgent message is queued.

Inside one actor nothing is reordered: the mailbox stays a strict sequence, so an
urgent message waits for the messages queued before it in its own actor, and it ranks
its actor once it is the head (docs/actors.md, "Priority and coalescing").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .dialect import Tx

#: Queued messages with a priority above 0: the partial index ``messages_urgent``.
_URGENT = (
    "SELECT actor_pk AS head_pk, seq AS head_seq, priority AS rank_ FROM {messages} "
    "WHERE priority > 0 AND status = 'queued'"
)


#: Whether any message with a priority above 0 is queued (one probe of that index).
_ANY_URGENT = "SELECT 1 FROM {messages} WHERE priority > 0 AND status = 'queued'"


def ready_in_rank_order(
    tx: Tx, columns: str, where: str, params: dict[str, Any], limit: int
) -> list[Sequence[Any]]:
    """Up to ``limit`` rows of ``columns`` of the actors matching ``where``: those whose
    head has a rank above 0 first (highest first, then by ``ready_at``), then the rest
    by ``ready_at``. ``columns`` are the actors table's; its primary key comes first;
    two more columns follow them in each row.

    The plain scan (by ``ready_at``) also says whether any urgent message is
    queued; only then does a second statement read the ranked actors, so a database
    with none pays one empty index probe per poll round, not a bigger statement.
    """
    plain = (
        f"SELECT {columns}, ready_at AS ready_, CASE WHEN EXISTS ({_ANY_URGENT}) "
        f"THEN 1 ELSE 0 END AS urgent_ FROM {{actors}} WHERE {where} "
        "ORDER BY ready_at LIMIT :limit"
    )
    rows = tx.rows(plain, {**params, "limit": limit})
    if not rows or not int(rows[0][-1]):
        return rows
    urgent = (
        f"SELECT {columns}, ready_at AS ready_, h.rank_ AS rank_ FROM ({_URGENT}) h "
        f"CROSS JOIN {{actors}} WHERE pk = h.head_pk AND done_seq + 1 = h.head_seq "
        f"AND {where} ORDER BY h.rank_ DESC, ready_at LIMIT :limit"
    )
    ranked = tx.rows(urgent, {**params, "limit": limit})
    first = {int(row[0]) for row in ranked}
    return [*ranked, *(row for row in rows if int(row[0]) not in first)][:limit]


def urgent_queued(tx: Tx) -> dict[tuple[str, int], int]:
    """Queued messages with a priority above 0, per (actor type, priority): the partial
    index answers it."""
    rows = tx.rows(
        "SELECT actor_type, priority, COUNT(*) FROM {messages} "
        "WHERE priority > 0 AND status = 'queued' GROUP BY actor_type, priority"
    )
    return {(str(r[0]), int(r[1])): int(r[2]) for r in rows}
