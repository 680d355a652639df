"""SQL of the process registry: who is running workers, and who stopped answering.

:class:`ProcessStatements` is a part of :class:`~solid_objects.store.Store`.

A process that runs workers registers a row keyed by its lease owner and
renews ``expires_at`` with the same transaction that renews its leases (a
heartbeat costs no extra commit). A row whose ``expires_at`` passed on the
database clock is *stale*: the process was killed, paused or cut off.

The registry is for people and for speed, not for safety: a stale process's
leases expire by themselves and its commits are refused by the lease fence
whatever the registry says. Recovering a stale process (:meth:`recover_process`)
only hands its leases and effect claims back at once instead of at expiry, and
marks the row stopped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .dialect import Tx
from .notices import WAKE
from .part import StorePart
from .sessions import SessionMark, held_sql, mark_name, pid_gone

_COLS = (
    "owner, host, pid, version, actor_types, started_at, heartbeat_at, expires_at, stopped_at, "
    "stop_reason, effect_names"
)


#: ``stop_reason`` of a process that is not stopped yet: ``stop()`` is draining it.
DRAINING = "draining"
#: ``stop_reason`` of a process a peer proved gone by its session mark or its pid.
GONE = "gone"


@dataclass(slots=True)
class ProcessRow:
    owner: str
    host: str
    pid: int
    version: str
    actor_types: str
    started_at: int
    heartbeat_at: int
    expires_at: int
    stopped_at: int | None
    stop_reason: str | None
    #: Leases the process holds now (unexpired), filled in by :meth:`list_processes`.
    leases: int = 0
    #: JSON list of the effect names it handles (schema 10; None for an older row).
    effect_names: str | None = None


def _process(r: Sequence[Any]) -> ProcessRow:
    return ProcessRow(
        r[0],
        r[1],
        int(r[2]),
        r[3],
        r[4],
        int(r[5]),
        int(r[6]),
        int(r[7]),
        None if r[8] is None else int(r[8]),
        r[9],
        effect_names=r[10],
    )


class ProcessStatements(StorePart):
    """``store.processes``: statements over ``{processes}`` (and the leases and claims it
    names)."""


    def _proc(self, template: str) -> str:
        return template.replace("{processes}", f"{self.prefix}processes")

    def register_process(
        self,
        tx: Tx,
        *,
        owner: str,
        host: str,
        pid: int,
        version: str,
        actor_types: str,
        ttl_ms: int,
        effect_names: str = "[]",
        session_mark: str | None = None,
        capabilities: str | None = None,
    ) -> None:
        """Insert the process row, or bring a stopped one back (a restarted runtime)."""
        params = {
            "mark": session_mark,
            "caps": capabilities,
            "owner": owner,
            "host": host[:255],
            "pid": pid,
            "version": version[:32],
            "types": actor_types,
            "effects": effect_names,
            "ttl": ttl_ms,
        }
        revived = tx.run(
            self._proc(
                "UPDATE {processes} SET actor_types = :types, effect_names = :effects, "
                "session_mark = :mark, capabilities = :caps, heartbeat_at = {now}, "
                "expires_at = {now} + :ttl, stopped_at = NULL, stop_reason = NULL "
                "WHERE owner = :owner"
            ),
            params,
        )
        if revived == 0:
            tx.run(
                self._proc(
                    "INSERT INTO {processes} (owner, host, pid, version, actor_types, "
                    "effect_names, session_mark, capabilities, started_at, heartbeat_at, "
                    "expires_at) VALUES (:owner, :host, :pid, :version, :types, :effects, "
                    ":mark, :caps, {now}, {now}, {now} + :ttl)"
                ),
                params,
            )

    def heartbeat(self, tx: Tx, owner: str, ttl_ms: int) -> bool:
        """Renew the process row; False if there is none (never registered)."""
        return (
            tx.run(
                self._proc(
                    "UPDATE {processes} SET heartbeat_at = {now}, expires_at = {now} + :ttl, "
                    # a draining process stays draining; a recovered one is live again
                    "stop_reason = CASE WHEN stopped_at IS NULL THEN stop_reason END, "
                    "stopped_at = NULL WHERE owner = :owner"
                ),
                {"owner": owner, "ttl": ttl_ms},
            )
            == 1
        )

    def mark_draining(self, tx: Tx, owner: str) -> bool:
        """The process is stopping: it takes no new work and finishes its turns
        (``stop_reason = 'draining'`` on a row not stopped; heartbeats keep it)."""
        return (
            tx.run(
                self._proc(
                    "UPDATE {processes} SET stop_reason = :reason "
                    "WHERE owner = :owner AND stopped_at IS NULL"
                ),
                {"owner": owner, "reason": DRAINING},
            )
            == 1
        )

    def mark_stopped(self, tx: Tx, owner: str, reason: str) -> bool:
        return (
            tx.run(
                self._proc(
                    "UPDATE {processes} SET stopped_at = {now}, stop_reason = :reason "
                    "WHERE owner = :owner AND stopped_at IS NULL"
                ),
                {"owner": owner, "reason": reason},
            )
            == 1
        )

    def list_processes(
        self, tx: Tx, *, include_stopped: bool, after: str | None, limit: int
    ) -> list[ProcessRow]:
        """Processes by owner; live and stale ones, and stopped ones when asked."""
        where = ["1 = 1"] if include_stopped else ["stopped_at IS NULL"]
        if after is not None:
            where.append("owner > :after")
        rows = [
            _process(r)
            for r in tx.rows(
                self._proc(
                    f"SELECT {_COLS} FROM {{processes}} WHERE {' AND '.join(where)} "
                    "ORDER BY owner LIMIT :limit"
                ),
                {"after": after, "limit": limit},
            )
        ]
        for row in rows:
            if row.stopped_at is None:
                row.leases = int(
                    tx.scalar(
                        "SELECT COUNT(*) FROM {actors} WHERE lease_owner = :owner "
                        "AND lease_expires_at > {now}",
                        {"owner": row.owner},
                    )
                )
        return rows

    def served_types(self, tx: Tx) -> dict[str, list[str]]:
        """The actor types each live process serves, by owner (heartbeat not expired)."""
        served: dict[str, list[str]] = {}
        for owner, types in tx.rows(
            self._proc(
                "SELECT owner, actor_types FROM {processes} "
                "WHERE stopped_at IS NULL AND expires_at > {now}"
            )
        ):
            try:
                served[str(owner)] = [str(t) for t in json.loads(types)]
            except ValueError:
                served[str(owner)] = []
        return served

    def handled_effect_names(self, tx: Tx, *, within_ms: int = 0) -> set[str]:
        """The effect names some process handles now, or did within the last ``within_ms``.

        A process was last live at its clean stop or recovery (``stopped_at``), else
        at the expiry of its last heartbeat.
        """
        handled: set[str] = set()
        for (names,) in tx.rows(
            self._proc(
                "SELECT effect_names FROM {processes} WHERE effect_names IS NOT NULL AND "
                "CASE WHEN stopped_at IS NULL THEN expires_at ELSE stopped_at END "
                "> {now} - :within"
            ),
            {"within": within_ms},
        ):
            try:
                handled.update(str(n) for n in json.loads(names))
            except ValueError:
                pass
        return handled

    def pending_effect_names(self, tx: Tx) -> dict[str, int]:
        """Effects not finished yet (pending, or running under a claim), by name."""
        return {
            str(name): int(count)
            for name, count in tx.rows(
                "SELECT name, COUNT(*) FROM {effects} WHERE status IN ('pending', 'running') "
                "GROUP BY name ORDER BY name"
            )
        }

    def backlog_types(self, tx: Tx) -> dict[str, int]:
        """Messages waiting to run (in a mailbox or delayed), by actor type."""
        backlog: dict[str, int] = {}
        for actor_type, count in tx.rows(
            "SELECT actor_type, SUM(next_seq - done_seq - 1) FROM {actors} "
            "WHERE next_seq > done_seq + 1 GROUP BY actor_type"
        ):
            backlog[str(actor_type)] = int(count or 0)
        for actor_type, count in tx.rows(
            "SELECT actor_type, COUNT(*) FROM {messages} WHERE status = 'scheduled' "
            "GROUP BY actor_type"
        ):
            backlog[str(actor_type)] = backlog.get(str(actor_type), 0) + int(count)
        return backlog

    def unhandled_effect_counts(self, tx: Tx) -> dict[str, int]:
        """Unfinished effects, by name, of the names no live process handles."""
        pending = self.pending_effect_names(tx)
        if not pending:
            return {}
        handled = self.handled_effect_names(tx)
        return {name: n for name, n in pending.items() if name not in handled}

    def unserved_type_counts(self, tx: Tx) -> dict[str, int]:
        """Waiting messages, by actor type, of the types no live process serves."""
        backlog = self.backlog_types(tx)
        if not backlog:
            return {}
        served = {t for types in self.served_types(tx).values() for t in types}
        return {t: n for t, n in sorted(backlog.items()) if n > 0 and t not in served}

    def missing_capability(
        self,
        tx: Tx,
        actor_type: str,
        operation: str | None,
        state_version: int,
        *,
        unserved: str | None = None,
    ) -> str | None:
        """What no live process can run of a message: ``Cart.checkout`` (no live code
        has the operation) or ``state version 2 of Cart`` (all live code is older than
        the actor's state); None when some live process can run it, and ``unserved``
        (default ``Cart.checkout``) when no live process describes the type.

        A live row without ``capabilities`` (written before schema 13) is taken to run
        every operation of the types it serves.
        """
        gaps: set[str] = set()
        for types, caps in tx.rows(
            self._proc(
                "SELECT actor_types, capabilities FROM {processes} "
                "WHERE stopped_at IS NULL AND expires_at > {now}"
            )
        ):
            try:
                if caps is None:
                    if actor_type in json.loads(types):
                        return None
                    continue
                served = json.loads(caps).get(actor_type)
            except (ValueError, AttributeError):
                continue
            if not isinstance(served, dict):
                continue
            if int(served.get("state_version", 1)) < state_version:
                gaps.add(f"state version {state_version} of {actor_type}")
            elif operation is not None and operation not in served.get("operations", []):
                gaps.add(f"{actor_type}.{operation}")
            else:
                return None
        if not gaps:
            if unserved is not None:
                return unserved
            return f"{actor_type}.{operation}" if operation is not None else actor_type
        return sorted(gaps)[0]

    def waiting_for_capability(self, tx: Tx) -> dict[str, int]:
        """Head messages that live processes serve the type of but none can run, by
        what is missing (``Cart.checkout``, ``state version 2 of Cart``)."""
        waiting: dict[str, int] = {}
        for actor_type, operation, state_version, count in tx.rows(
            "SELECT a.actor_type, m.operation, a.state_version, COUNT(*) FROM {actors} a "
            "JOIN {messages} m ON m.actor_pk = a.pk AND m.seq = a.done_seq + 1 "
            "WHERE a.next_seq > a.done_seq + 1 AND m.status = 'queued' "
            "GROUP BY a.actor_type, m.operation, a.state_version"
        ):
            gap = self.missing_capability(
                tx, str(actor_type), str(operation), int(state_version), unserved=""
            )
            if gap:
                waiting[gap] = waiting.get(gap, 0) + int(count)
        return waiting

    def process(self, tx: Tx, owner: str) -> ProcessRow | None:
        row = tx.row(
            self._proc(f"SELECT {_COLS} FROM {{processes}} WHERE owner = :owner"),
            {"owner": owner},
        )
        return None if row is None else _process(row)

    def stale_processes(self, tx: Tx, *, grace_ms: int, limit: int) -> list[str]:
        """Owners of unstopped processes whose heartbeat expired ``grace_ms`` ago or more."""
        return [
            str(r[0])
            for r in tx.rows(
                self._proc(
                    "SELECT owner FROM {processes} WHERE stopped_at IS NULL "
                    "AND expires_at + :grace < {now} ORDER BY expires_at LIMIT :limit"
                ),
                {"grace": grace_ms, "limit": limit},
            )
        ]

    def session_mark(self, owner: str) -> SessionMark:
        """The session mark ``owner`` holds while it runs (see ``store.sessions``)."""
        engine = self.session_engine
        if engine is None and not self.dialect.pooled:
            engine = self.engine
        return SessionMark(engine, self.dialect.family, mark_name(self.prefix, owner))

    def gone_processes(
        self, tx: Tx, *, owner: str, host_identity: str | None, limit: int
    ) -> list[str]:
        """Unstopped peers of ``owner`` proved gone: their session mark is free (no
        session holds it), or, on this host, their pid is gone or was reused.

        A peer with no mark, or one on another host, is never here: its heartbeat tells.
        """
        held = held_sql(self.dialect.family)
        gone: list[str] = []
        for peer, pid, mark in tx.rows(
            self._proc(
                "SELECT owner, pid, session_mark FROM {processes} "
                "WHERE stopped_at IS NULL AND session_mark IS NOT NULL AND owner <> :owner "
                "ORDER BY owner LIMIT :limit"
            ),
            {"owner": owner, "limit": limit},
        ):
            kind, _, value = str(mark).partition(":")
            if kind == "lock" and held is not None:
                row = tx.row(held, {"name": value})
                if row is None or row[0] is None:
                    gone.append(str(peer))
            elif kind == "pid" and host_identity is not None:
                identity, _, started = value.rpartition(":")
                if identity == host_identity and started.isdigit():
                    if pid_gone(int(pid), int(started)):
                        gone.append(str(peer))
        return gone

    def recover_gone_process(self, tx: Tx, owner: str) -> tuple[int, int] | None:
        """:meth:`recover_process` for a peer proved gone, unless another peer (or the
        process's own clean stop) stopped it first: None then. Wakes the pollers of
        every process, so the released actors are claimed at once."""
        if not self.mark_stopped(tx, owner, GONE):
            return None
        released = self._release_holdings(tx, owner)
        if released[0]:
            self.notify(tx, WAKE)
        return released

    def recover_process(self, tx: Tx, owner: str, reason: str) -> tuple[int, int]:
        """Mark a process stopped; hand its leases and effect claims back now.

        Safe whatever the process is really doing: its commits and effect outcomes
        are fenced by the lease and the claim, which this takes away. Returns the
        (leases, effect claims) released.
        """
        self.mark_stopped(tx, owner, reason)
        return self._release_holdings(tx, owner)

    def _release_holdings(self, tx: Tx, owner: str) -> tuple[int, int]:
        leases = tx.run(
            "UPDATE {actors} SET lease_owner = NULL, lease_token = NULL, "
            "lease_expires_at = NULL, ready_at = CASE WHEN next_seq > done_seq + 1 "
            "THEN COALESCE(ready_at, {now}) ELSE NULL END WHERE lease_owner = :owner",
            {"owner": owner},
        )
        claims = tx.run(
            "UPDATE {effects} SET available_at = {now}, claimed_by = NULL "
            "WHERE status = 'running' AND claimed_by = :owner",
            {"owner": owner},
        )
        return leases, claims
