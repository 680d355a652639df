"""The reads behind the metrics gauges: cheap aggregates taken at scrape time.

Both statements read only rows with pending work or open dead letters, through
the ``ready_at`` index and the partial index of dead messages, so a scrape
costs little however many idle actors and finished messages the tables hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from .dialect import Tx


@dataclass(slots=True)
class TypeGauges:
    """Per actor type: queued messages, actors with queued work, open dead letters."""

    actor_type: str
    queued: int = 0
    actors_with_work: int = 0
    #: Seconds since the longest-waiting actor of this type became ready (0 if none).
    oldest_ready_seconds: float = 0.0
    dead_letters: int = 0


def type_gauges(tx: Tx, prefix: str) -> list[TypeGauges]:
    """Mailbox depth and open dead letters per actor type, sorted by type."""
    gauges: dict[str, TypeGauges] = {}
    now = int(tx.scalar("SELECT {now}"))
    for actor_type, queued, actors, oldest in tx.rows(
        "SELECT actor_type, SUM(next_seq - done_seq - 1), COUNT(*), MIN(ready_at) "
        "FROM {actors} WHERE ready_at IS NOT NULL AND next_seq > done_seq + 1 "
        "GROUP BY actor_type"
    ):
        gauges[actor_type] = TypeGauges(
            actor_type,
            queued=int(queued or 0),
            actors_with_work=int(actors or 0),
            oldest_ready_seconds=max(0.0, (now - int(oldest)) / 1000) if oldest else 0.0,
        )
    # A dead letter stays 'dead' after an operator retried or discarded it; only
    # those without a resolution need attention.
    for actor_type, count in tx.rows(
        "SELECT m.actor_type, COUNT(*) FROM {messages} m WHERE m.status = 'dead' "
        f"AND NOT EXISTS (SELECT 1 FROM {prefix}resolutions r WHERE r.message_id = m.id) "
        "GROUP BY m.actor_type"
    ):
        gauges.setdefault(actor_type, TypeGauges(actor_type)).dead_letters = int(count)
    return [gauges[t] for t in sorted(gauges)]
