"""SQL of retention: which finished rows may go, and deleting them in small batches.

:class:`RetentionStatements` is a part of :class:`~solid_objects.store.Store`.

Only rows that no live work reads are candidates, each kind with its own rule
(:data:`RULES`): finished messages (completed, rejected, of a destroyed actor,
and dead letters an operator already retried or discarded), effects that are
done, processes that stopped, and, only when asked, audit records. Open dead
letters, dead effects, queued and scheduled messages and everything of a live
mailbox are never touched. Ids are time-ordered, so scanning by primary key
meets the oldest rows first and a batch costs about its own size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Literal, TypeVar

from .dialect import Tx
from .part import StorePart

T = TypeVar("T")

#: Rows deleted per transaction: short transactions never hold up live work.
PRUNE_BATCH = 500

PruneKind = Literal["messages", "effects", "processes", "audit"]

#: A cutoff per actor type for messages (``retention_by_type``); other types use ``cutoff``.
TypeCutoffs = Mapping[str, int]


def _cutoff_sql(by_type: TypeCutoffs | None) -> tuple[str, dict[str, object]]:
    """The messages rule's cutoff: ``:cutoff``, or a CASE over the message's actor type.

    One scan of the table in id order serves every type, each with its own cutoff.
    """
    if not by_type:
        return ":cutoff", {}
    cases = []
    params: dict[str, object] = {}
    for n, (actor_type, cutoff) in enumerate(sorted(by_type.items())):
        cases.append(f"WHEN :ct{n} THEN :cc{n}")
        params[f"ct{n}"] = actor_type
        params[f"cc{n}"] = cutoff
    return f"(CASE {{messages}}.actor_type {' '.join(cases)} ELSE :cutoff END)", params


#: The WHERE clause of each kind's candidates: finished before ``:cutoff``.
RULES: dict[PruneKind, tuple[str, str, str]] = {
    # kind: (table, key column, condition)
    "messages": (
        "{messages}",
        "id",
        "((status IN ('completed', 'rejected', 'destroyed', 'cancelled', 'replaced') "
        "AND completed_at < {cutoff}) "
        "OR (status = 'dead' AND EXISTS (SELECT 1 FROM {resolutions} r "
        "WHERE r.message_id = {messages}.id AND r.resolved_at < {cutoff})))",
    ),
    "effects": ("{effects}", "id", "status = 'done' AND completed_at < :cutoff"),
    "processes": ("{processes}", "owner", "stopped_at IS NOT NULL AND stopped_at < :cutoff"),
    "audit": ("{audit}", "id", "at < :cutoff"),
}


class RetentionStatements(StorePart):
    """``store.retention``: the rules and batched deletes of pruning."""

    def prune_older(
        self,
        kind: PruneKind,
        cutoff: int,
        *,
        record: Callable[[Tx, list[str], int], None] | None = None,
        progress: Callable[[str, int], None] | None = None,
        by_type: TypeCutoffs | None = None,
    ) -> int:
        """Delete every candidate of ``kind`` finished before ``cutoff``, a batch per commit.

        ``record(tx, keys, deleted)`` runs inside each batch's transaction (the audit
        record); ``progress(kind, deleted_so_far)`` after each commit. ``by_type``: the
        messages of these actor types use their own cutoff.
        """
        deleted = 0
        after: str | None = None
        while True:
            with self.read() as tx:
                keys = self.prunable(
                    tx, kind, cutoff, after=after, limit=PRUNE_BATCH, by_type=by_type
                )
            if not keys:
                return deleted
            after = keys[-1]

            def body(tx: Tx, keys: list[str] = keys) -> int:
                n = self.prune(tx, kind, cutoff, keys, by_type=by_type)
                if record is not None:
                    record(tx, keys, n)
                return n

            deleted += int(self.transact(body))
            if progress is not None:
                progress(kind, deleted)

    def _rule(
        self, kind: PruneKind, by_type: TypeCutoffs | None
    ) -> tuple[str, str, str, dict[str, object]]:
        table, key, condition = RULES[kind]
        cutoff, params = _cutoff_sql(by_type if kind == "messages" else None)
        return table, key, condition.replace("{cutoff}", cutoff), params

    def _retention(self, template: str) -> str:
        for name in ("processes", "audit", "resolutions"):
            template = template.replace("{" + name + "}", f"{self.prefix}{name}")
        return template

    def count_prunable(
        self, tx: Tx, kind: PruneKind, cutoff: int, *, by_type: TypeCutoffs | None = None
    ) -> int:
        table, _key, condition, params = self._rule(kind, by_type)
        return int(
            tx.scalar(
                self._retention(f"SELECT COUNT(*) FROM {table} WHERE {condition}"),
                {"cutoff": cutoff, **params},
            )
        )

    def prunable(
        self,
        tx: Tx,
        kind: PruneKind,
        cutoff: int,
        *,
        after: str | None,
        limit: int,
        by_type: TypeCutoffs | None = None,
    ) -> list[str]:
        """The next ``limit`` candidate keys in key order, after ``after``."""
        table, key, condition, params = self._rule(kind, by_type)
        return [
            str(r[0])
            for r in tx.rows(
                self._retention(
                    f"SELECT {key} FROM {table} WHERE {condition}"
                    + ("" if after is None else f" AND {key} > :after")
                    + f" ORDER BY {key} LIMIT :limit"
                ),
                {"cutoff": cutoff, "after": after, "limit": limit, **params},
            )
        ]

    def prune(
        self,
        tx: Tx,
        kind: PruneKind,
        cutoff: int,
        keys: Sequence[str],
        *,
        by_type: TypeCutoffs | None = None,
    ) -> int:
        """Delete the given candidates that still qualify (the rule is checked again)."""
        if not keys:
            return 0
        table, key, condition, rule_params = self._rule(kind, by_type)
        placeholders = ", ".join(f":k{i}" for i in range(len(keys)))
        params: dict[str, object] = {f"k{i}": k for i, k in enumerate(keys)}
        params.update(rule_params)
        params["cutoff"] = cutoff
        deleted = tx.run(
            self._retention(f"DELETE FROM {table} WHERE {key} IN ({placeholders}) AND {condition}"),
            params,
        )
        if kind == "messages":
            self.journal.forget(tx, placeholders, params)
            # Resolutions of dead letters that are gone: nothing can read them any more.
            tx.run(
                self._retention(
                    f"DELETE FROM {{resolutions}} WHERE message_id IN ({placeholders}) "
                    "AND NOT EXISTS (SELECT 1 FROM {messages} m "
                    "WHERE m.id = {resolutions}.message_id)"
                ),
                params,
            )
        return deleted
