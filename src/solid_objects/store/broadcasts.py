"""SQL of the realtime outbox: broadcast rows and the reads that deliver them.

:class:`BroadcastStatements` is a part of :class:`~solid_objects.store.Store`.
A broadcast row is written inside the turn's fenced commit (``write_staged``),
so it exists if and only if the state it describes committed. It is keyed by
the actor's incarnation (``actor_pk``, never reused, larger for a later
incarnation) and revision (the seq of the turn that committed it), so a
reader that remembers the last ``(incarnation, revision)`` it delivered reads
exactly what came after, in order, whichever process committed it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from .dialect import Tx
from .notices import broadcast_hint
from .part import StorePart


@dataclass(frozen=True, slots=True)
class BroadcastRow:
    actor_type: str
    actor_id: str
    incarnation: int
    revision: int
    #: ``{"values": {...}, "invalidated": [...], "payloads": bool}`` or ``{"destroyed": true}``.
    changes: str


@dataclass(frozen=True, slots=True)
class ActorHead:
    """An actor's committed position: its incarnation, revision and state."""

    actor_type: str
    actor_id: str
    incarnation: int
    revision: int
    state: str | None
    state_version: int


#: Rows deleted per transaction by :meth:`BroadcastStatements.prune_broadcasts`.
PRUNE_BATCH = 500
_DESTROYED = '{"destroyed":true}'


class BroadcastStatements(StorePart):
    """``store.broadcasts``: the rows realtime subscribers read, and their pruning."""


    def prune_broadcasts(self, cutoff: int) -> int:
        """Delete broadcasts written before ``cutoff``, a batch per commit.

        No subscriber needs an old row (a subscription starts from a snapshot of the
        committed state). The row that ends an incarnation is kept: it is how a later
        snapshot of the destroyed actor is placed after everything its old subscribers saw.
        """
        deleted = 0
        while True:
            with self.read() as tx:
                keys = tx.rows(
                    "SELECT actor_pk, revision FROM {broadcasts} WHERE created_at < :cutoff "
                    "AND changes <> :destroyed ORDER BY created_at LIMIT :limit",
                    {"cutoff": cutoff, "destroyed": _DESTROYED, "limit": PRUNE_BATCH},
                )
            if not keys:
                return deleted
            pairs = " OR ".join(
                f"(actor_pk = :p{n} AND revision = :r{n})" for n in range(len(keys))
            )
            params: dict[str, object] = {"cutoff": cutoff}
            for n, (pk, revision) in enumerate(keys):
                params[f"p{n}"], params[f"r{n}"] = int(pk), int(revision)
            statement = f"DELETE FROM {{broadcasts}} WHERE created_at < :cutoff AND ({pairs})"
            deleted += int(self.transact(functools.partial(_run, statement, params)))
            if len(keys) < PRUNE_BATCH:
                return deleted

    def write_broadcast(
        self, tx: Tx, *, actor_pk: int, actor_type: str, actor_id: str, revision: int, changes: str
    ) -> None:
        """One broadcast row, and a wake-up for listening processes, in ``tx``."""
        tx.run(
            "INSERT INTO {broadcasts} (actor_pk, revision, actor_type, actor_id, changes, "
            "created_at) VALUES (:pk, :rev, :t, :i, :changes, {now})",
            {"pk": actor_pk, "rev": revision, "t": actor_type, "i": actor_id, "changes": changes},
        )
        self.notify(tx, broadcast_hint(actor_type, actor_id))

    def broadcast_destroyed(self, tx: Tx, actor_pk: int, actor_type: str, actor_id: str) -> None:
        """Mark the end of an incarnation for its subscribers (called by ``destroy``)."""
        revision = tx.scalar("SELECT next_seq FROM {actors} WHERE pk = :pk", {"pk": actor_pk})
        if revision is None:
            return
        self.write_broadcast(
            tx,
            actor_pk=actor_pk,
            actor_type=actor_type,
            actor_id=actor_id,
            revision=int(revision),
            changes=_DESTROYED,
        )

    def broadcasts_after(
        self, tx: Tx, actor_type: str, actor_id: str, incarnation: int, revision: int, limit: int
    ) -> list[BroadcastRow]:
        """The identity's broadcasts after ``(incarnation, revision)``, oldest first."""
        rows = tx.rows(
            "SELECT actor_pk, revision, changes FROM {broadcasts} "
            "WHERE actor_type = :t AND actor_id = :i "
            "AND (actor_pk > :inc OR (actor_pk = :inc AND revision > :rev)) "
            "ORDER BY actor_pk, revision LIMIT :limit",
            {"t": actor_type, "i": actor_id, "inc": incarnation, "rev": revision, "limit": limit},
        )
        return [BroadcastRow(actor_type, actor_id, int(r[0]), int(r[1]), r[2]) for r in rows]

    def latest_broadcast(self, tx: Tx, actor_type: str, actor_id: str) -> BroadcastRow | None:
        """The identity's newest broadcast (a destroyed actor's last word), or None."""
        row = tx.row(
            "SELECT actor_pk, revision, changes FROM {broadcasts} "
            "WHERE actor_type = :t AND actor_id = :i "
            "ORDER BY actor_pk DESC, revision DESC LIMIT 1",
            {"t": actor_type, "i": actor_id},
        )
        return (
            None
            if row is None
            else BroadcastRow(actor_type, actor_id, int(row[0]), int(row[1]), row[2])
        )

    def actor_heads(self, tx: Tx, identities: Sequence[tuple[str, str]]) -> list[ActorHead]:
        """The committed incarnation, revision and state of each identity that exists."""
        if not identities:
            return []
        where = " OR ".join(
            f"(actor_type = :t{n} AND actor_id = :i{n})" for n in range(len(identities))
        )
        params: dict[str, object] = {}
        for n, (actor_type, actor_id) in enumerate(identities):
            params[f"t{n}"], params[f"i{n}"] = actor_type, actor_id
        rows = tx.rows(
            "SELECT actor_type, actor_id, pk, done_seq, state, state_version FROM {actors} "
            f"WHERE {where}",
            params,
        )
        return [ActorHead(r[0], r[1], int(r[2]), int(r[3]), r[4], int(r[5])) for r in rows]


def _run(statement: str, params: dict[str, object], tx: Tx) -> int:
    return tx.run(statement, params)
