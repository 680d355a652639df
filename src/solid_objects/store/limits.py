"""SQL of the per-type turn limit (``max_active_turns``): counting and serializing claims.

:class:`LimitStatements` is a part of :class:`~solid_objects.store.Store`.

An actor of a limited type is *active* while it holds a live lease (not expired): a
worker of such a type holds a lease for one turn and gives it back after it
(``engine/worker.py``), so the live leases are the turns running now, counted from
the database's rows, whichever process runs them. A claim of a limited type first
locks the type's row in ``type_locks`` and then counts: two processes claiming the
same type take turns through that lock, so both cannot count ``N - 1`` and both
claim. On MySQL/MariaDB (REPEATABLE READ) the lock is the transaction's first
statement, so the count, its first plain read, sees every claim committed before
the lock was granted. SQLite has one writer at a time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .dialect import Tx
from .part import StorePart

#: An actor row of the type holding a lease that has not expired.
_LIVE = "lease_owner IS NOT NULL AND lease_expires_at > {now}"


class LimitStatements(StorePart):
    """Counting live claims per type, and the lock a limited claim takes first."""

    def active(self, tx: Tx, types: Sequence[str]) -> dict[str, int]:
        """How many actors of each of ``types`` hold a live lease now (absent: none)."""
        if not types:
            return {}
        names = ", ".join(f":t{i}" for i in range(len(types)))
        rows = tx.rows(
            "SELECT actor_type, COUNT(*) FROM {actors} "
            f"WHERE actor_type IN ({names}) AND {_LIVE} GROUP BY actor_type",
            {f"t{i}": t for i, t in enumerate(types)},
        )
        return {str(r[0]): int(r[1]) for r in rows}

    def saturated(self, tx: Tx, limits: Mapping[str, int]) -> list[str]:
        """The types of ``limits`` whose live claims reached their limit."""
        counts = self.active(tx, sorted(limits))
        return sorted(t for t, n in counts.items() if n >= limits[t])

    def held_back(self, tx: Tx, limits: Mapping[str, int]) -> dict[str, tuple[int, int]]:
        """Per limited type: its turns running now, and its actors with due work and
        no lease that wait because the type is at its limit (0 while it is not)."""
        counts = self.active(tx, sorted(limits))
        full = sorted(t for t, n in counts.items() if n >= limits[t])
        waiting: dict[str, int] = {}
        if full:
            names = ", ".join(f":t{i}" for i in range(len(full)))
            rows = tx.rows(
                "SELECT actor_type, COUNT(*) FROM {actors} WHERE ready_at <= {now} "
                "AND paused = 0 AND next_seq > done_seq + 1 "
                "AND (lease_owner IS NULL OR lease_expires_at <= {now}) "
                f"AND actor_type IN ({names}) GROUP BY actor_type",
                {f"t{i}": t for i, t in enumerate(full)},
            )
            waiting = {str(r[0]): int(r[1]) for r in rows}
        return {t: (counts.get(t, 0), waiting.get(t, 0)) for t in sorted(limits)}

    def lock_type(self, tx: Tx, actor_type: str) -> None:
        """Hold the type's lock row until the transaction ends (made on first use)."""
        lock = "SELECT actor_type FROM " + self.prefix + "type_locks WHERE actor_type = :t"
        lock += "{for_update}"
        if tx.row(lock, {"t": actor_type}) is not None:
            return
        insert = {
            "sqlite": "INSERT OR IGNORE INTO {table} (actor_type) VALUES (:t)",
            "postgresql": "INSERT INTO {table} (actor_type) VALUES (:t) ON CONFLICT DO NOTHING",
        }.get(self.dialect.family, "INSERT IGNORE INTO {table} (actor_type) VALUES (:t)")
        tx.run(insert.replace("{table}", self.prefix + "type_locks"), {"t": actor_type})
        tx.row(lock, {"t": actor_type})

    def room(self, tx: Tx, actor_type: str, limit: int, pk: int) -> bool:
        """Whether one more actor (``pk``) of the type may start a turn: locks the type,
        then counts the others' live claims."""
        self.lock_type(tx, actor_type)
        busy = tx.scalar(
            f"SELECT COUNT(*) FROM {{actors}} WHERE actor_type = :t AND {_LIVE} AND pk <> :pk",
            {"t": actor_type, "pk": pk},
        )
        return int(busy or 0) < limit
