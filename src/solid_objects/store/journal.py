"""SQL of the per-turn journal: what each finished turn of a journaled class ran against.

A row per finished message (completed, rejected, dead), written inside the turn's
fenced commit, so the journal holds exactly the committed turns: the state the turn
ran against, the state it committed (NULL when unchanged or failed) and the state
version. The journal is read to show an actor's history, to replay a message against
the state it originally ran on, and to fork an actor as it stood after a message.
Rows go with their message when retention prunes it (``retention.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .dialect import Tx


@dataclass(frozen=True, slots=True)
class JournalRow:
    message_id: str
    actor_pk: int
    seq: int
    status: str
    state_before: str | None
    state_after: str | None
    state_version: int
    created_at: int
    operation: str
    arguments: str
    actor_type: str
    actor_id: str


_COLS = (
    "j.message_id, j.actor_pk, j.seq, j.status, j.state_before, j.state_after, "
    "j.state_version, j.created_at, m.operation, m.arguments, m.actor_type, m.actor_id"
)


def _row(r: tuple[object, ...]) -> JournalRow:
    return JournalRow(
        message_id=str(r[0]),
        actor_pk=int(r[1]),  # type: ignore[call-overload]
        seq=int(r[2]),  # type: ignore[call-overload]
        status=str(r[3]),
        state_before=None if r[4] is None else str(r[4]),
        state_after=None if r[5] is None else str(r[5]),
        state_version=int(r[6]),  # type: ignore[call-overload]
        created_at=int(r[7]),  # type: ignore[call-overload]
        operation=str(r[8]),
        arguments=str(r[9]),
        actor_type=str(r[10]),
        actor_id=str(r[11]),
    )


class JournalStatements:
    """The journal's statements; composed into the store (``store.journal``)."""

    def __init__(self, prefix: str) -> None:
        self.table = f"{prefix}journal"

    def write(
        self,
        tx: Tx,
        *,
        message_id: str,
        actor_pk: int,
        seq: int,
        status: str,
        state_before: str | None,
        state_after: str | None,
        state_version: int,
    ) -> None:
        """Record a finished turn, inside its commit (after the fence held)."""
        tx.run(
            f"INSERT INTO {self.table} (message_id, actor_pk, seq, status, state_before, "
            "state_after, state_version, created_at) VALUES (:id, :pk, :seq, :status, "
            ":before, :after, :sv, {now})",
            {
                "id": message_id,
                "pk": actor_pk,
                "seq": seq,
                "status": status,
                "before": state_before,
                "after": state_after,
                "sv": state_version,
            },
        )

    def of_actor(
        self, tx: Tx, actor_pk: int, *, before_seq: int | None, limit: int
    ) -> list[JournalRow]:
        """An incarnation's entries, newest first, below ``before_seq`` when given."""
        params: dict[str, object] = {"pk": actor_pk, "limit": limit}
        below = ""
        if before_seq is not None:
            below, params["before"] = " AND j.seq < :before", before_seq
        return [
            _row(tuple(r))
            for r in tx.rows(
                f"SELECT {_COLS} FROM {self.table} j JOIN {{messages}} m ON m.id = j.message_id "
                f"WHERE j.actor_pk = :pk{below} ORDER BY j.seq DESC LIMIT :limit",
                params,
            )
        ]

    def of_message(self, tx: Tx, message_id: str) -> JournalRow | None:
        """The entry of one finished message, or None (not journaled, or pruned)."""
        found = tx.row(
            f"SELECT {_COLS} FROM {self.table} j JOIN {{messages}} m ON m.id = j.message_id "
            "WHERE j.message_id = :id",
            {"id": message_id},
        )
        return None if found is None else _row(tuple(found))

    def forget(self, tx: Tx, placeholders: str, params: dict[str, object]) -> None:
        """Delete the entries of pruned messages (``placeholders`` name their ids)."""
        tx.run(f"DELETE FROM {self.table} WHERE message_id IN ({placeholders})", params)

    def create_actor(
        self, tx: Tx, actor_type: str, actor_id: str, state: str | None, state_version: int
    ) -> bool:
        """A new actor row holding ``state`` (a fork); False when the actor exists."""
        found = tx.scalar(
            "SELECT pk FROM {actors} WHERE actor_type = :t AND actor_id = :i",
            {"t": actor_type, "i": actor_id},
        )
        if found is not None:
            return False
        tx.run(
            "INSERT INTO {actors} (actor_type, actor_id, state, state_version, next_seq, "
            "done_seq, attempt, lease_generation, paused, created_at, updated_at) VALUES "
            "(:t, :i, :state, :sv, 1, 0, 0, 0, 0, {now}, {now})",
            {"t": actor_type, "i": actor_id, "state": state, "sv": state_version},
        )
        return True
