"""A worker's commit of turns, and when it fails: charge the failure to its own turn alone.

A worker commits the turns of many actors in one transaction (:class:`BatchCommit`). If
that transaction fails, the turns are committed again apart, so that one turn the
database refuses (a constraint, an application's trigger, a value that does not fit)
never fails or holds up the others, and the refused turn follows the failure path
of any failed turn: an attempt used up, a retry with backoff, finally a dead letter.
Only the failure path pays for any of this.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sqlalchemy.exc import SQLAlchemyError

from .. import faults
from ..codec import canonical_json, decode_json
from ..errors import DatabaseError, LeaseLost, error_document
from ..observability.events import Instrumentation, log_fields
from ..options import Options
from ..store import Committed, MessageRow, Store, Tx
from ..tracebacks import format_traceback
from .activation import Activation
from .turn import TurnOutcome, failure
from .turn_commit import TurnCommit

log = logging.getLogger("solid_objects.worker")

#: What a failed transaction raises: the library's wrapper, or SQLAlchemy's own.
DB_ERRORS = (SQLAlchemyError, DatabaseError)
#: One turn of a batch: the activation, its message and what the turn produced.
Turn = tuple[Activation, MessageRow, TurnOutcome]


class BatchCommit:
    """A worker's commit of several turns: all in one transaction, and apart when that
    fails. ``drop`` forgets an activation (``release``: and gives its lease back)."""

    def __init__(
        self,
        store: Store,
        options: Options,
        turn_commit: TurnCommit,
        instrument: Instrumentation,
        drop: Callable[..., None],
    ) -> None:
        self.store = store
        self.options = options
        self.turn_commit = turn_commit
        self.instrument = instrument
        self._drop = drop
        #: Commits that failed in a row: the backoff after a failed commit grows with it.
        self._commit_failures = 0

    def commit(self, pending: list[Turn], read_next: list[bool]) -> list[Committed | None]:
        """Commit ``pending`` (sorted in the lock order) in one transaction, or apart if
        that fails; None for each turn whose lease was lost or that could not commit."""
        started = time.perf_counter()
        if len(pending) == 1 and self.turn_commit.is_one_statement(*pending[0]):
            return self._commit_alone(pending, read_next, started)
        try:
            results = self.store.transact(self._turns_body(pending, read_next), isolated=False)
        except DB_ERRORS as exc:
            return self._commit_apart(pending, read_next, exc, started)
        self._commit_failures = 0
        faults.point("commit.committed")
        self.instrument.committed(pending, results, started)
        return results

    def _commit_alone(
        self, pending: list[Turn], read_next: list[bool], started: float
    ) -> list[Committed | None]:
        """One turn whose commit is one statement, run as its own transaction: one round
        trip instead of three. ``commit.body`` is just before it (a crash there, as
        inside a transaction, writes nothing); a refused fence records the overrun in a
        transaction of its own."""
        act, message, outcome = pending[0]

        def statement(tx: Tx) -> Committed:
            faults.point("commit.body")
            return self.turn_commit.write(tx, act, message, outcome, read_next[0])

        try:
            committed: Committed | None = self.store.run_statement(statement)
        except LeaseLost as exc:
            fields = log_fields(message, act.head_attempt)
            log.warning("%s", exc, extra={"solid_action": "lease_lost", **fields})
            try:
                self.store.transact(lambda tx: self._record_overrun(tx, act, message))
            except DB_ERRORS:
                log.debug("could not record the overrun of %s", message.id, exc_info=True)
            committed = None
        except DB_ERRORS as exc:
            return self._commit_apart(pending, read_next, exc, started)
        self._commit_failures = 0
        faults.point("commit.committed")
        self.instrument.committed(pending, [committed], started)
        return [committed]

    def _turns_body(
        self, pending: list[Turn], read_next: list[bool]
    ) -> Callable[[Tx], list[Committed | None]]:
        def body(tx: Tx) -> list[Committed | None]:
            results: list[Committed | None] = []
            for (act, message, outcome), read in zip(pending, read_next, strict=True):
                try:
                    results.append(self.turn_commit.write(tx, act, message, outcome, read))
                except LeaseLost as exc:
                    fields = log_fields(message, act.head_attempt)
                    log.warning("%s", exc, extra={"solid_action": "lease_lost", **fields})
                    self._record_overrun(tx, act, message)
                    results.append(None)
            faults.point("commit.body")
            return results

        return body

    def _commit_apart(
        self, pending: list[Turn], read_next: list[bool], error: Exception, started: float
    ) -> list[Committed | None]:
        """The batch's transaction failed: commit each activation's turns on their own,
        so that the failure is charged to the turn that caused it and no other.

        Only the failure path pays for this. A turn whose commit the database refuses
        (a constraint, a trigger) is recorded as a failed attempt, retried with backoff
        and finally a dead letter, like any failure. While the database takes no writes
        at all (full disk, lost connection) nothing is charged: the turns run again.
        Re-running a turn's commit is safe even if the failed one did commit: its fence
        then refuses it.
        """
        results: list[Committed | None] = [None] * len(pending)
        groups: list[list[int]] = []
        for i, (act, _, _) in enumerate(pending):
            if groups and pending[groups[-1][0]][0] is act:
                groups[-1].append(i)
            else:
                groups.append([i])
        down: Exception | None = None
        for group in groups:
            failure_: Exception | None = error if len(groups) == 1 else None
            if down is None and failure_ is None:
                failure_ = self._commit_part(pending, read_next, group, results, started)
                if failure_ is None:
                    continue
            if down is None and failure_ is not None and not self.store.unavailable(failure_):
                failure_ = self._charge(pending, read_next, group, results, failure_, started)
                if failure_ is None:
                    continue
            down = down or failure_ or error
            lost = [pending[i] for i in group if results[i] is None]
            self.instrument.committed(lost, None, started)
            self._drop(pending[group[0]][0], release=True)
        if down is None:
            self._commit_failures = 0
            return results
        log.error(
            "commit of %d turns failed; they will run again",
            len(pending),
            exc_info=(type(down), down, down.__traceback__),
        )
        # The database refuses writes (full disk, failover): back off, do not spin.
        self._commit_failures += 1
        time.sleep(min(0.01 * 2 ** min(self._commit_failures, 7), 1.0))
        return results

    def _commit_part(
        self,
        pending: list[Turn],
        read_next: list[bool],
        indexes: list[int],
        results: list[Committed | None],
        started: float,
    ) -> Exception | None:
        """Commit the turns at ``indexes`` in one transaction; the error if it failed."""
        part = [pending[i] for i in indexes]
        try:
            committed = self.store.transact(
                self._turns_body(part, [read_next[i] for i in indexes]), isolated=False
            )
        except DB_ERRORS as exc:
            return exc
        for i, c in zip(indexes, committed, strict=True):
            results[i] = c
        self.instrument.committed(part, committed, started)
        return None

    def _charge(
        self,
        pending: list[Turn],
        read_next: list[bool],
        group: list[int],
        results: list[Committed | None],
        error: Exception,
        started: float,
    ) -> Exception | None:
        """One activation's commit failed on its own: find the turn (a chain commits
        turn by turn) and record its failure; the error if even that could not be written."""
        failed = group[0]
        if len(group) > 1:
            for i in group:
                found = self._commit_part(pending, read_next, [i], results, started)
                if found is None and results[i] is None:
                    return None  # the lease was lost: the rest cannot commit either
                if found is not None:
                    failed, error = i, found
                    break
            else:
                return None  # each committed alone
            if self.store.unavailable(error):
                return error
        act, message, outcome = pending[failed]
        log.warning(
            "the database refused the commit of message %s to %s %r (%s): %r",
            message.id,
            act.actor_type,
            act.actor_id,
            message.operation,
            error,
            exc_info=error,
            extra={"solid_action": "commit_refused", **log_fields(message, act.head_attempt)},
        )
        refused(self.options, act, outcome, error)
        unrecorded = self._commit_part(pending, read_next, [failed], results, started)
        if unrecorded is None and failed != group[-1]:
            # The rest of the chain built on the refused turn: run it again later, from
            # committed state, and let the lease go so that nothing waits for it.
            self._drop(act, release=True)
        return unrecorded

    def _record_overrun(self, tx: Tx, act: Activation, message: MessageRow) -> None:
        """A turn's commit was refused by its fence: if its lease merely expired, the
        turn outlasted it, so it counts as a failed attempt with backoff (see
        ``Store.record_overrun``) instead of running again at once, forever."""
        if act.turn_seconds < self.options.lease_duration / 2:
            # Renewals run every third of the lease: a turn this short cannot have
            # starved them. The lease lapsed around it (a stall, a slow commit).
            return
        if message.seq is None:
            return
        error = canonical_json(
            error_document(
                LeaseLost(
                    f"the turn outlasted its lease (lease_duration="
                    f"{self.options.lease_duration:g}s), which could not be renewed while it "
                    "ran (an operation holding the GIL, or a stalled process): raise "
                    "lease_duration, or make the operation shorter"
                )
            )
        )
        delay = self.options.retry_delay(act.head_attempt)
        if self.store.turns.record_overrun(
            tx,
            act.lease,
            message,
            error=error,
            attempt=act.head_attempt,
            delay_ms=int(delay * 1000),
        ):
            log.warning(
                "message %s to %s %r (%s) outlasted its lease (attempt %d of %d); "
                "retrying in %.2fs",
                message.id,
                act.actor_type,
                act.actor_id,
                message.operation,
                act.head_attempt,
                self.options.max_attempts,
                delay,
                extra={"solid_action": "lease_overrun", **log_fields(message, act.head_attempt)},
            )


def refused(options: Options, act: Activation, outcome: TurnOutcome, error: Exception) -> None:
    """Turn ``outcome`` into the failure of a commit the database refused: an attempt
    used up, retried with backoff, then a dead letter, nothing staged written."""
    failed = failure(
        DatabaseError(f"the database refused the turn's commit: {error}"), deterministic=False
    )
    if act.head_attempt >= options.max_attempts:
        failed.kind = "dead"
    outcome.kind, outcome.error, outcome.staged = failed.kind, failed.error, None
    outcome.state = outcome.result = None
    outcome.traceback = format_traceback(error)


def last_error(message: MessageRow) -> str | None:
    """The stored reason of the message's last recorded failure, if any."""
    document = decode_json(message.error) if message.error else None
    if not isinstance(document, dict):
        return None
    return str(document.get("message", "")) or None
