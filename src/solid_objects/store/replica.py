"""Reads that tolerate staleness, sent to a replica while it keeps up.

A replica's own ``now() - pg_last_xact_replay_timestamp()`` grows on an idle primary,
so staleness is measured by log position instead: the primary's position is sampled
with the time it was taken, and the replica is as fresh as the newest sample its
replayed position has reached. On PostgreSQL the positions are WAL positions
(``pg_current_wal_lsn()`` against the replica's ``pg_last_wal_replay_lsn()``); on
MariaDB, GTID positions (the primary's ``@@gtid_binlog_pos`` against the replica's
``@@gtid_slave_pos``, one sequence number per replication domain). Past ``max_lag``
seconds (or when the replica cannot be asked) the read goes to the primary, and the
fallback is logged once per episode. Nothing that decides a turn reads here: only
``@query``, ``snapshot()`` asked with ``stale_ok`` and the administration API's listings
(``replica_for_admin``) do.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from .dialect import Dialect, Tx

log = logging.getLogger("solid_objects.replica")


#: A log position: per replication domain, how far (PostgreSQL has one domain, 0).
Position = dict[int, int]


def _lsn(value: str) -> int:
    high, low = value.split("/")
    return (int(high, 16) << 32) + int(low, 16)


def _wal(value: Any) -> Position | None:
    return None if value is None else {0: _lsn(str(value))}


def _gtids(value: Any) -> Position | None:
    """``"0-1-42,1-2-7"`` (domain-server-sequence, one per domain) as ``{0: 42, 1: 7}``."""
    if value is None:
        return None
    position: Position = {}
    for gtid in str(value).split(","):
        if gtid.strip():
            domain, _, seq = gtid.strip().split("-")
            position[int(domain)] = int(seq)
    return position


def reached(replayed: Position, sample: Position) -> bool:
    """Whether a replica at ``replayed`` has applied everything up to ``sample``."""
    return all(replayed.get(domain, -1) >= seq for domain, seq in sample.items())


#: Per database family: the primary's position, the replica's replayed one, the parser.
POSITIONS: dict[str, tuple[str, str, Callable[[Any], Position | None]]] = {
    "postgresql": ("SELECT pg_current_wal_lsn()", "SELECT pg_last_wal_replay_lsn()", _wal),
    "mysql": ("SELECT @@gtid_binlog_pos", "SELECT @@gtid_slave_pos", _gtids),
}


class ReplicaReads:
    """Where a stale-tolerant read goes: the replica when within ``max_lag``, else the
    primary (``primary_read``)."""

    def __init__(
        self,
        replica: Engine,
        primary: Engine,
        dialect: Dialect,
        sql: Any,
        primary_read: Callable[[], AbstractContextManager[Tx]],
        *,
        max_lag: float,
    ) -> None:
        self.engine = replica
        self.primary = primary
        self.dialect = dialect
        self.sql = sql
        self.primary_read = primary_read
        self.max_lag = max_lag
        #: Checks are cached this long, so a burst of reads asks the servers once.
        self.recheck = min(0.5, max_lag / 5)
        self.replica_reads = 0
        self.fallbacks = 0
        #: The staleness measured by the last check, in seconds (infinite when unknown).
        self.lag = float("inf")
        self._positions = POSITIONS[dialect.family]
        self._samples: deque[tuple[float, Position]] = deque()
        self._checked = float("-inf")
        self._fresh = False
        self._lock = threading.Lock()

    def staleness(self) -> float:
        """Seconds the replica may be behind the primary (infinite when unknown)."""
        primary_sql, replica_sql, parse = self._positions
        now = time.monotonic()
        with self.primary.connect() as conn:
            primary = parse(conn.execute(text(primary_sql)).scalar_one())
        if primary is not None:
            self._samples.append((now, primary))
        with self.engine.connect() as conn:
            replayed = parse(conn.execute(text(replica_sql)).scalar_one())
        if replayed is None:
            return float("inf")
        times = [t for t, sample in self._samples if reached(replayed, sample)]
        if not times:
            return float("inf")
        newest = max(times)
        while self._samples and self._samples[0][0] < newest:
            self._samples.popleft()
        return now - newest

    def fresh(self) -> bool:
        """Whether the replica is within the bound, checked at most every ``recheck`` s."""
        with self._lock:
            if time.monotonic() - self._checked < self.recheck:
                return self._fresh
            try:
                self.lag = self.staleness()
            except SQLAlchemyError as exc:
                log.debug("replica lag check failed: %r", exc)
                self.lag = float("inf")
            fresh = self.lag <= self.max_lag
            lag = self.max_lag
            first = self._checked == float("-inf")
            if not fresh and (self._fresh or first):  # once per episode, not per read
                log.warning("replica not known within %.1fs of the primary: reading it", lag)
            self._fresh, self._checked = fresh, time.monotonic()
            return fresh

    @contextmanager
    def read(self) -> Iterator[Tx]:
        with self.read_measured() as (tx, _):
            yield tx

    @contextmanager
    def read_measured(self) -> Iterator[tuple[Tx, float | None]]:
        """A read, and at most how many seconds behind the primary it may be: the last
        check's staleness plus the time since that check; None when the primary reads."""
        if not self.fresh():
            self.fallbacks += 1
            with self.primary_read() as tx:
                yield tx, None
            return
        self.replica_reads += 1
        behind = self.lag + max(0.0, time.monotonic() - self._checked)
        with self.dialect.read(self.engine, self.sql) as tx:
            yield tx, behind
