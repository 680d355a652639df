"""SQL of idle actors: quiet ones (reconciliation), expiring them; and the test helper's.

:class:`IdleStatements` is a part of :class:`~solid_objects.store.Store`.

An actor is *quiet* when nothing is waiting for it: not paused, an empty mailbox,
no delayed message, no reminder, no effect still to run, and untouched
(``updated_at``: the last enqueue that claimed it, turn or pause) since a cutoff.
An actor *expires* when it is quiet and also holds no live lease and no open
dead letter: deleting it then loses nothing but its state, which is what
``state_ttl`` asks for. Expiry locks each candidate row and checks the rule again
in the deleting transaction, so a message enqueued meanwhile (it locks the same
row) either lands before the check, and the actor stays, or after the delete, and
starts a new incarnation. A ``send_to`` (``enqueue_later``) locks no actor row; on
MySQL/MariaDB it meets the expiry another way: the expiry reads each candidate's
unentered messages with a locking read at REPEATABLE READ, which waits for a send's
uncommitted insert or makes the insert wait for the delete, after which the send
reads the row again (``MailboxStatements._follow_incarnation``). On PostgreSQL a
``send_to`` holds the target incarnation's advisory lock shared until it commits; the
expiry tries each candidate's exclusive (never waiting) and passes over what it cannot
get, and a send that waited for an expiry's commit reads the row again. Candidates whose row another
transaction holds are passed over (``SKIP LOCKED``), so an expiry never waits for a
transaction that could be waiting for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import schema
from .admin_rows import ACTOR_COLS, ActorRow, read_actor
from .dialect import Tx
from .part import StorePart
from .promotion import incarnation_lock_key

if TYPE_CHECKING:
    pass

#: Nothing waits for the actor ``a``, and it was not touched since ``:cutoff``.
QUIET = (
    "a.paused = 0 AND a.next_seq = a.done_seq + 1 AND a.updated_at <= :cutoff "
    "AND NOT EXISTS (SELECT 1 FROM {messages} m WHERE m.actor_pk = a.pk "
    "AND m.status = 'scheduled') "
    "AND NOT EXISTS (SELECT 1 FROM {reminders} r WHERE r.actor_pk = a.pk) "
    "AND NOT EXISTS (SELECT 1 FROM {effects} e WHERE e.actor_pk = a.pk "
    "AND e.status IN ('pending', 'running'))"
)
#: Quiet, and deleting it loses no lease holder's work and no dead letter to repair.
EXPIRABLE = (
    QUIET + " AND (a.lease_owner IS NULL OR a.lease_expires_at <= {now}) "
    "AND NOT EXISTS (SELECT 1 FROM {messages} d WHERE d.actor_pk = a.pk "
    "AND d.status = 'dead' AND NOT EXISTS "
    "(SELECT 1 FROM {resolutions} x WHERE x.message_id = d.id))"
)
_COLS = ", ".join(f"a.{c.strip()}" for c in ACTOR_COLS.split(","))


class IdleStatements(StorePart):
    """``store.idle``: reads and deletes over ``{actors}`` with the rules above."""


    def _idle(self, template: str) -> str:
        return template.replace("{resolutions}", f"{self.prefix}resolutions")

    def quiet_actors(
        self,
        tx: Tx,
        *,
        actor_type: str | None,
        cutoff: int,
        after: tuple[str, str] | None,
        limit: int,
    ) -> list[ActorRow]:
        """Quiet actors by (type, id), after the cursor."""
        where = [QUIET]
        params: dict[str, Any] = {"cutoff": cutoff, "limit": limit}
        if actor_type is not None:
            where.append("a.actor_type = :t")
            params["t"] = actor_type
        if after is not None:
            where.append("(a.actor_type > :a_t OR (a.actor_type = :a_t AND a.actor_id > :a_i))")
            params.update(a_t=after[0], a_i=after[1])
        return [
            read_actor(r)
            for r in tx.rows(
                f"SELECT {_COLS} FROM {{actors}} a WHERE {' AND '.join(where)} "
                "ORDER BY a.actor_type, a.actor_id LIMIT :limit",
                params,
            )
        ]

    def actors_after(
        self, tx: Tx, actor_type: str, after: str | None, limit: int
    ) -> list[ActorRow]:
        """The next ``limit`` actors of a type by id (a scan of the identity index)."""
        return [
            read_actor(r)
            for r in tx.rows(
                f"SELECT {ACTOR_COLS} FROM {{actors}} WHERE actor_type = :t"
                + ("" if after is None else " AND actor_id > :after")
                + " ORDER BY actor_id LIMIT :limit",
                {"t": actor_type, "after": after, "limit": limit},
            )
        ]

    def count_expirable(self, tx: Tx, actor_type: str, cutoff: int) -> int:
        return int(
            tx.scalar(
                self._idle(
                    f"SELECT COUNT(*) FROM {{actors}} a WHERE a.actor_type = :t AND {EXPIRABLE}"
                ),
                {"t": actor_type, "cutoff": cutoff},
            )
        )

    def expirable(
        self, tx: Tx, actor_type: str, cutoff: int, *, after: str | None, limit: int
    ) -> list[tuple[int, str]]:
        """The next ``limit`` (pk, actor id) candidates of a type by id, after ``after``."""
        return [
            (int(r[0]), str(r[1]))
            for r in tx.rows(
                self._idle(
                    "SELECT a.pk, a.actor_id FROM {actors} a WHERE a.actor_type = :t AND "
                    + EXPIRABLE
                    + ("" if after is None else " AND a.actor_id > :after")
                    + " ORDER BY a.actor_id LIMIT :limit"
                ),
                {"t": actor_type, "cutoff": cutoff, "after": after, "limit": limit},
            )
        ]

    def expire(self, tx: Tx, cutoff: int, pks: Sequence[int]) -> list[tuple[str, str]]:
        """Delete the candidates that still qualify; (type, id) of each one deleted.

        The rows are locked first (in pk order; rows another transaction holds are
        passed over), then, on MySQL/MariaDB, their unentered messages, then the
        rule is read again: what a concurrent enqueue or ``send_to`` committed before
        the locks were granted is seen (see the module's docstring). On MySQL/MariaDB
        this must be the transaction's first statement (it sets its isolation). Each
        step is one statement for the whole batch, not one per candidate.
        """
        if not pks:
            return []
        dialect = self.dialect
        if dialect.expiry_isolation_sql is not None:
            tx.run(dialect.expiry_isolation_sql)
        lock = " FOR UPDATE SKIP LOCKED" if dialect.supports_skip_locked else "{for_update}"
        placeholders = ", ".join(f":p{n}" for n in range(len(pks)))
        params: dict[str, Any] = {f"p{n}": pk for n, pk in enumerate(pks)}
        locked = [
            int(r[0])
            for r in tx.rows(
                f"SELECT pk FROM {{actors}} WHERE pk IN ({placeholders}) ORDER BY pk{lock}",
                params,
            )
        ]
        if dialect.incarnation_try_sql is not None and locked:
            locked = self._try_incarnations(tx, dialect.incarnation_try_sql, locked)
        if not locked:
            return []
        placeholders = ", ".join(f":p{n}" for n in range(len(locked)))
        params = {f"p{n}": pk for n, pk in enumerate(locked)}
        if dialect.expiry_isolation_sql is not None:
            # Next-key locks over each candidate's (pk, NULL): see the module's docstring.
            tx.rows(
                "SELECT id FROM {messages} WHERE actor_pk IN "
                f"({placeholders}) AND seq IS NULL FOR UPDATE",
                params,
            )
        still = tx.rows(
            self._idle(
                f"SELECT a.pk, a.actor_type, a.actor_id FROM {{actors}} a "
                f"WHERE a.pk IN ({placeholders}) AND {EXPIRABLE}"
            ),
            {**params, "cutoff": cutoff},
        )
        if not still:
            return []
        gone = ", ".join(f":g{n}" for n in range(len(still)))
        tx.run(
            f"DELETE FROM {{actors}} WHERE pk IN ({gone})",
            {f"g{n}": int(r[0]) for n, r in enumerate(still)},
        )
        expired = [(str(r[1]), str(r[2])) for r in still]
        for actor_type in sorted({t for t, _ in expired}):
            self.projections.delete(tx, actor_type, [i for t, i in expired if t == actor_type])
        return expired

    def _try_incarnations(self, tx: Tx, try_sql: str, pks: list[int]) -> list[int]:
        """The candidates whose incarnation lock this transaction got, in one statement.

        A ``send_to`` committing to a candidate holds its lock shared: that one is
        passed over (the try never waits).
        """
        rows = ", ".join(
            f"(CAST(:p{n} AS BIGINT), CAST(:k{n} AS INTEGER))" for n in range(len(pks))
        )
        params: dict[str, Any] = {f"p{n}": pk for n, pk in enumerate(pks)}
        params.update({f"k{n}": incarnation_lock_key(pk) for n, pk in enumerate(pks)})
        got = {int(r[0]) for r in tx.rows(try_sql.replace("{candidates}", rows), params)}
        return [pk for pk in pks if pk in got]

    # --- the test helper ---------------------------------------------------------------

    def effects_from(self, tx: Tx, first_id: str) -> list[tuple[Any, ...]]:
        """Effects whose id is ``first_id`` or later (ids sort by creation), in id order:
        (id, name, arguments, actor_type, actor_id, status)."""
        return [
            tuple(r)
            for r in tx.rows(
                "SELECT id, name, arguments, actor_type, actor_id, status FROM {effects} "
                "WHERE id >= :first ORDER BY id",
                {"first": first_id},
            )
        ]

    def empty_tables(self, tx: Tx) -> list[str]:
        """Delete every row of the library's tables but the schema version (for tests).

        ``DELETE``, not ``TRUNCATE``: it is transactional everywhere and keeps the
        incarnation counter, so an actor made after the reset never reuses a pk.
        """
        md = schema.build_metadata(self.prefix)
        names = [t.name for t in reversed(md.sorted_tables) if t.name != f"{self.prefix}schema"]
        names += self.projections.known_tables(tx)
        for name in names:
            tx.run(f"DELETE FROM {name}")
        return names
