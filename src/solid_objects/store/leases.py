"""Claims and leases: taking an actor's lease, keeping it, and giving it back.

A lease is the right to run an actor's turns; every write a turn makes is fenced by
it (``store.turns``). The statements here take a free or expired lease by
compare-and-set on its generation, renew the leases a process still caches, find
the ones it lost, and release them between turns or at shutdown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import priority
from .dialect import Tx
from .part import StorePart
from .rows import MSG_COLS, Claimed, Lease, ReadyActor, message_row, new_token

_RELEASE = (
    "UPDATE {actors} SET lease_owner = NULL, lease_token = NULL, "
    "lease_expires_at = NULL, attempt = 0, "
    "ready_at = CASE WHEN next_seq > done_seq + 1 "
    "THEN COALESCE(ready_at, {now}) ELSE NULL END WHERE lease_owner = :owner"
)


def _head_due(now_ms: int | None) -> str:
    """The condition that an actor's head is due: by the database's clock, or also by a
    test clock (``:ready_now``) when one is given; what is due now stays due."""
    if now_ms is None:
        return "ready_at <= {now}"
    return "(ready_at <= {now} OR ready_at <= :ready_now)"


class LeaseStatements(StorePart):
    """``store.leases``: find ready actors, claim, renew, release."""

    # --- claim -----------------------------------------------------------------------

    def find_ready(
        self,
        tx: Tx,
        owner: str,
        limit: int,
        types: Sequence[str],
        *,
        now_ms: int | None = None,
    ) -> list[ReadyActor]:
        """Actors of ``types`` with due work, free to claim or already leased by ``owner``.

        ``lease_owner`` is reported only for a lease that has not expired. ``now_ms``
        (a test clock) decides which held-back heads (a retry's backoff) are due; leases
        always expire on the database's clock.

        A worker only claims the types it can run, so a process that does not know a
        type (a rolling deploy) leaves its messages to one that does.
        """
        if not types:
            return []
        names = ", ".join(f":t{i}" for i in range(len(types)))
        params: dict[str, Any] = {f"t{i}": t for i, t in enumerate(types)}
        params.update(owner=owner, ready_now=now_ms)
        # Actors with an urgent message queued come first (store/priority.py).
        rows = priority.ready_in_rank_order(
            tx,
            "pk, CASE WHEN lease_expires_at <= {now} THEN NULL ELSE lease_owner END, "
            "lease_generation, actor_type, actor_id",
            f"{_head_due(now_ms)} AND paused = 0 AND (lease_owner IS NULL "
            "OR lease_expires_at <= {now} OR lease_owner = :owner) "
            f"AND {self.dialect.unindexed('actor_type')} IN ({names})",
            params,
            limit,
        )
        return [ReadyActor(int(r[0]), r[1], int(r[2]), (r[3], r[4])) for r in rows]

    def claim(
        self,
        tx: Tx,
        pk: int,
        generation: int,
        owner: str,
        lease_ms: int,
        *,
        now_ms: int | None = None,
        type_limit: tuple[str, int] | None = None,
    ) -> Claimed | None:
        """Take a free or expired lease (compare-and-set on the generation).

        ``type_limit`` (the actor's type and its ``max_active_turns``): claim only if
        fewer other actors of the type hold a live lease, counted under the type's lock
        (``store.limits``); a limited claim must be its transaction's first statement.

        ``now_ms`` (a test clock) decides whether a held-back head is due, as in
        :meth:`find_ready`.

        A claim counts as a start of the head message (``attempt``), so a message whose
        worker dies every time runs out of attempts, except when this process retakes
        its own expired lease: it is alive, so the message did not kill it (it was
        paused past the lease, or its commit failed), and a pause must not use up the
        message's attempts.
        """
        if type_limit is not None and not self.store.limits.room(tx, *type_limit, pk):
            return None
        lease = Lease(pk, owner, new_token(), generation + 1)
        changed = tx.run(
            # attempt first: MySQL evaluates SET assignments left to right, so a later
            # one would see the new lease_owner.
            "UPDATE {actors} SET "
            "attempt = attempt + CASE WHEN lease_owner = :claimer THEN 0 ELSE 1 END, "
            "lease_owner = :owner, lease_token = :token, "
            "lease_generation = :gen + 1, lease_expires_at = {now} + :lease_ms "
            "WHERE pk = :pk AND lease_generation = :gen "
            f"AND {_head_due(now_ms)} "
            "AND paused = 0 AND (lease_owner IS NULL OR lease_expires_at <= {now})",
            {
                "ready_now": now_ms,
                "owner": owner,
                "claimer": owner,  # a second name: PostgreSQL types each use of one apart
                "token": lease.token,
                "gen": generation,
                "lease_ms": lease_ms,
                "pk": pk,
            },
        )
        return None if changed != 1 else self.load_claimed(tx, lease)

    def load_claimed(self, tx: Tx, lease: Lease) -> Claimed | None:
        """The committed state and head message of an actor whose lease we hold."""
        row = tx.row(
            "SELECT a.actor_type, a.actor_id, a.state, a.state_version, a.done_seq, a.attempt, "
            + ", ".join(f"m.{c.strip()}" for c in MSG_COLS.split(","))
            + " FROM {actors} a LEFT JOIN {messages} m "
            "ON m.actor_pk = a.pk AND m.seq = a.done_seq + 1 WHERE a.pk = :pk",
            {"pk": lease.pk},
        )
        if row is None:
            return None
        return Claimed(
            lease=lease,
            actor_type=row[0],
            actor_id=row[1],
            state=row[2],
            state_version=int(row[3]),
            done_seq=int(row[4]),
            attempt=int(row[5]),
            head=None if row[6] is None else message_row(row, 6),
        )

    # --- holding ----------------------------------------------------------------------

    def renew(self, tx: Tx, owner: str, pks: Sequence[int], lease_ms: int) -> int:
        """Extend the unexpired leases of ``owner`` on ``pks``, 500 per statement.

        Only leases the process still caches: one it dropped (after a failed commit)
        must expire so that any process, this one included, can claim it again.

        It locks many actor rows, which a batch of enqueues (``writer.EnqueueBatcher``)
        locks too, one by one in ``(actor_type, actor_id)`` order. On PostgreSQL the rows
        are first locked in that order (``COLLATE "C"`` compares as Python does), so the
        two cannot deadlock. An ``UPDATE`` locks rows in the order it finds them, and
        InnoDB locks a ``SELECT ... ORDER BY ... FOR UPDATE``'s rows as it reads them
        too: on MariaDB a renewal can deadlock with a batch; InnoDB detects it at once
        and rolls one back, and ``transact`` runs that one again.
        """
        renewed = 0
        for start in range(0, len(pks), 500):
            chunk = pks[start : start + 500]
            placeholders = ", ".join(f":p{i}" for i in range(len(chunk)))
            params: dict[str, Any] = {f"p{i}": pk for i, pk in enumerate(chunk)}
            params.update(owner=owner, lease_ms=lease_ms)
            if self.dialect.name == "postgresql" and len(chunk) > 1:
                tx.rows(
                    "SELECT pk FROM {actors} WHERE lease_owner = :owner "
                    f"AND pk IN ({placeholders}) "
                    'ORDER BY actor_type COLLATE "C", actor_id COLLATE "C"{for_update}',
                    params,
                )
            renewed += tx.run(
                "UPDATE {actors} SET lease_expires_at = {now} + :lease_ms "
                f"WHERE lease_owner = :owner AND lease_expires_at > {{now}} "
                f"AND pk IN ({placeholders})",
                params,
            )
        return renewed

    def lost_leases(self, tx: Tx, owner: str, pks: Sequence[int]) -> list[int]:
        """Which of ``pks`` ``owner`` no longer holds (expired, taken over, released).

        Read only after :meth:`renew` renewed fewer leases than asked.
        """
        held: set[int] = set()
        for start in range(0, len(pks), 500):
            chunk = pks[start : start + 500]
            placeholders = ", ".join(f":p{i}" for i in range(len(chunk)))
            params: dict[str, Any] = {f"p{i}": pk for i, pk in enumerate(chunk)}
            params["owner"] = owner
            held.update(
                int(r[0])
                for r in tx.rows(
                    "SELECT pk FROM {actors} WHERE lease_owner = :owner "
                    f"AND lease_expires_at > {{now}} AND pk IN ({placeholders})",
                    params,
                )
            )
        return [pk for pk in pks if pk not in held]

    def release(self, tx: Tx, lease: Lease) -> bool:
        """Give a lease back between turns; a no-op if it is no longer ours."""
        return (
            tx.run(
                _RELEASE + " AND pk = :pk AND lease_token = :token AND lease_generation = :gen",
                {
                    "pk": lease.pk,
                    "owner": lease.owner,
                    "token": lease.token,
                    "gen": lease.generation,
                },
            )
            == 1
        )

    def leave(self, tx: Tx, lease: Lease) -> bool:
        """Give back a lease claimed for a head this process's code cannot run (a
        rolling deploy): the actor is ready at once for a process that can, and the
        start the claim counted is taken back (``attempt``), so leaving uses up none
        of the message's attempts."""
        return (
            tx.run(
                "UPDATE {actors} SET lease_owner = NULL, lease_token = NULL, "
                "lease_expires_at = NULL, "
                "attempt = CASE WHEN attempt > 0 THEN attempt - 1 ELSE 0 END, "
                "ready_at = CASE WHEN next_seq > done_seq + 1 "
                "THEN COALESCE(ready_at, {now}) ELSE NULL END WHERE lease_owner = :owner "
                "AND pk = :pk AND lease_token = :token AND lease_generation = :gen",
                {
                    "pk": lease.pk,
                    "owner": lease.owner,
                    "token": lease.token,
                    "gen": lease.generation,
                },
            )
            == 1
        )

    def release_all(self, tx: Tx, owner: str) -> int:
        """Give back every lease of ``owner`` (shutdown)."""
        return tx.run(_RELEASE, {"owner": owner})
