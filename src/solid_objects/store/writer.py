"""Group commit: one writer thread runs many callers' transactions in one commit.

SQLite has a single writer, and every statement releases and retakes the
GIL; with many threads each taking the write lock in turn, a transaction
spends most of its time queued for the GIL while holding the lock (measured:
~600 µs for 30 µs of SQL). Instead, threads hand their transaction bodies
to one thread that owns a connection, runs every body waiting at that moment
inside one ``BEGIN IMMEDIATE ... COMMIT``, each under its own ``SAVEPOINT`` so
one body's failure rolls back only its own writes (bodies that raise only before
writing skip the savepoint: ``isolated=False``), and completes each caller's
future only after the ``COMMIT`` returned. Nothing is acknowledged before it
is durable, and no caller ever gets another body's error: a driver error in
one body, or a failed ``COMMIT``, makes the others run again without it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from sqlalchemy import Engine

from .. import deadline
from ..errors import DatabaseError
from .dialect import Tx

log = logging.getLogger("solid_objects.store")

T = TypeVar("T")
_Job = tuple[Callable[[Tx], Any], Future[Any], bool]

_MAX_BATCH = 256


class _Isolate(Exception):
    """A body submitted with ``isolated=False`` raised a driver error, or raised after
    writing: undo the batch and run it again with every body in its own savepoint."""


class _Aborted(Exception):
    """A body's error ended the whole transaction (SQLite rolls back by itself on a
    full disk, an I/O error, ...): that body fails, the others run again."""

    def __init__(self, index: int, error: BaseException) -> None:
        super().__init__(index)
        self.index = index
        self.error = error


class GroupWriter:
    def __init__(self, engine: Engine, render: Callable[[str], str], begin_sql: str) -> None:
        self._engine = engine
        self._render = render
        self._begin_sql = begin_sql
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._local = threading.local()
        self._driver_error: type[Exception] = engine.dialect.loaded_dbapi.Error

    def submit(self, body: Callable[[Tx], T], *, isolated: bool = True) -> Future[T]:
        """Queue ``body(tx)`` for the next group transaction.

        The future completes once that transaction committed (or failed). Its done
        callbacks run on the writer thread: they must be quick and must not submit.
        """
        if getattr(self._local, "inside", False):
            raise RuntimeError("store.transact() called from inside a transaction body")
        self._ensure_thread()
        future: Future[T] = Future()
        self._jobs.put((body, future, isolated))
        return future

    def close(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(None)
            thread.join(10)

    def _ensure_thread(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="solid-writer", daemon=True
                    )
                    self._thread.start()

    def _run(self) -> None:
        self._local.inside = True
        raw = None
        while True:
            first = self._jobs.get()
            if first is None:
                break
            batch = [first]
            while len(batch) < _MAX_BATCH:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    self._jobs.put(None)
                    break
                batch.append(job)
            try:
                if raw is None:
                    try:
                        raw = self._engine.raw_connection()
                    except Exception as exc:
                        raise DatabaseError(f"cannot connect: {exc}", exc, disconnect=True) from exc
                healthy = self._commit(raw, batch)
            except BaseException as exc:  # nothing is durable
                log.warning("group commit of %d transactions failed: %r", len(batch), exc)
                for _, future, _ in batch:
                    if not future.done():
                        future.set_exception(self._wrap(exc))
                healthy = False
            if not healthy and raw is not None:
                try:
                    raw.invalidate()
                finally:
                    raw = None
        if raw is not None:
            raw.close()

    def _wrap(self, exc: BaseException) -> BaseException:
        """A driver error as the library's own type, with SQLite's reason in the text."""
        if isinstance(exc, self._driver_error):
            return DatabaseError(f"{type(exc).__name__}: {exc}", exc)
        return exc

    def _commit(self, raw: Any, batch: list[_Job]) -> bool:
        """Commit ``batch``, each body's failure charged to that body alone.

        The common case is one transaction. Only on failure: a driver error in a body
        re-runs the batch with every body in a savepoint; a body whose error ends the
        transaction fails and the others run again; a failed ``COMMIT`` (nothing
        committed: SQLite is local) runs each body in a transaction of its own.
        False when the connection should be replaced.
        """
        try:
            self._run_batch(raw, batch)
            return True
        except _Isolate:
            pass
        except self._driver_error as exc:  # COMMIT (or BEGIN) failed
            if len(batch) == 1:
                raise
            log.warning(
                "group commit of %d transactions failed: %r; each runs alone", len(batch), exc
            )
            return self._one_by_one(raw, batch)
        remaining = batch
        while remaining:
            try:
                self._run_batch(raw, remaining, isolate_all=True)
                return True
            except _Aborted as aborted:
                remaining[aborted.index][1].set_exception(self._wrap(aborted.error))
                remaining = remaining[: aborted.index] + remaining[aborted.index + 1 :]
            except self._driver_error as exc:
                if len(remaining) == 1:
                    raise
                log.warning(
                    "group commit of %d transactions failed: %r; each runs alone",
                    len(remaining),
                    exc,
                )
                return self._one_by_one(raw, remaining)
        return True

    def _one_by_one(self, raw: Any, batch: list[_Job]) -> bool:
        healthy = True
        for job in batch:
            try:
                self._run_batch(raw, [job], isolate_all=True)
            except _Aborted as aborted:
                job[1].set_exception(self._wrap(aborted.error))
            except self._driver_error as exc:
                job[1].set_exception(self._wrap(exc))
                healthy = False
        return healthy

    def _run_batch(self, raw: Any, batch: list[_Job], *, isolate_all: bool = False) -> None:
        driver = raw.driver_connection
        cursor = raw.cursor()
        tx = Tx(cursor, self._render, raw)
        outcomes: list[tuple[bool, Any]] = []
        driver.execute(self._begin_sql)
        try:
            for index, (body, _, isolated) in enumerate(batch):
                if not (isolated or isolate_all):
                    # The body promises to raise only before writing anything; a driver
                    # error, which may come mid-way, or a broken promise makes the batch
                    # run again with every body isolated.
                    changes = driver.total_changes
                    try:
                        outcomes.append((True, body(tx)))
                    except self._driver_error as exc:
                        raise _Isolate() from exc
                    except Exception as exc:
                        if driver.total_changes != changes:
                            raise _Isolate() from exc
                        outcomes.append((False, exc))
                    continue
                driver.execute("SAVEPOINT solid_job")
                try:
                    result = body(tx)
                except Exception as exc:
                    if not driver.in_transaction:
                        raise _Aborted(index, exc) from exc
                    try:
                        driver.execute("ROLLBACK TO solid_job")
                        driver.execute("RELEASE solid_job")
                    except self._driver_error:
                        raise _Aborted(index, exc) from exc
                    outcomes.append((False, self._wrap(exc)))
                else:
                    driver.execute("RELEASE solid_job")
                    outcomes.append((True, result))
            driver.execute("COMMIT")
        except BaseException:
            if driver.in_transaction:
                driver.execute("ROLLBACK")
            raise
        finally:
            cursor.close()
        for (_, future, _), (ok, value) in zip(batch, outcomes, strict=True):
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)


class _Enqueue:
    __slots__ = ("alone", "batch", "body", "deadline", "future", "key", "one_statement", "woken")

    def __init__(
        self, key: Any, body: Callable[[Tx], Any], one_statement: Callable[[Tx], Any] | None
    ) -> None:
        self.key = key
        self.body = body
        #: The body as one statement (None when it wrote nothing), for running alone.
        self.one_statement = one_statement
        #: The caller's deadline (``solid_objects.deadline``), which its thread carries.
        self.deadline = deadline.current()
        self.future: Future[Any] = Future()
        #: Set when this job's batch committed (or failed), or when it must lead one, or
        #: run its body alone (``alone``).
        self.woken = threading.Event()
        self.batch: list[_Enqueue] | None = None
        self.alone = False


#: Enqueues one batch holds at most: a bounded transaction, locks held briefly.
MAX_ENQUEUE_BATCH = 64
#: How long a batch waits for one row lock (seconds) before it gives up and every body
#: runs alone in its caller's thread: one actor whose row is held long (an application
#: transaction that enqueued with ``connection=``) must not hold up everybody else.
BATCH_LOCK_WAIT = 1.0


class EnqueueBatcher:
    """The servers' group commit for enqueues: callers enqueueing (to any actor) while
    an enqueue transaction is in flight join the next one.

    On PostgreSQL and MariaDB every transaction pays a ``COMMIT`` (a WAL flush) and a
    few round trips, so one process's senders are bound by commits, not by the work.
    Here the first caller runs its transaction at once; those arriving meanwhile wait,
    and the first of them then runs up to ``MAX_ENQUEUE_BATCH`` of theirs in one
    transaction. No thread runs more than one batch, and a lone caller waits for
    nobody.

    Deadlock-safe: a batch runs its bodies sorted by ``key`` (``(actor_type,
    actor_id)``: each enqueue locks that actor's row until the commit), so two batches
    lock actor rows in one order and cannot deadlock with each other; the sort is
    stable, so enqueues to one actor keep their arrival order. The other writers that
    lock several actor rows use the same order: ``promote``, a worker's commit of
    several actors' turns, the poller's claims, the lease renewal on PostgreSQL
    (``store.leases.renew``). A deadlock that remains possible (with a worker's commit
    inserting a ``send_to`` target's row, with a renewal on MariaDB) rolls the whole
    batch back and ``commit`` (``Store.transact``) runs it again from scratch: bodies
    are functions of the transaction alone.

    Failures: if the batch fails for any other reason (a body raised: a full mailbox,
    an idempotency conflict, a refused statement; or a lock wait gave up), each body
    runs again alone in its caller's thread, under that caller's own deadline, so only
    a failing body fails; unless the ``COMMIT`` itself failed: then nobody knows what
    committed, and every caller gets the error.

    Deadlines: a batch's lock waits are bounded by the earliest deadline of its callers
    (``solid_objects.deadline``) and by ``BATCH_LOCK_WAIT``, so no caller waits for a
    lock past its own deadline because it shared a transaction; a batch that gives up
    hands each body back to run alone, bounded by its own caller's deadline only. A
    caller that has waited ``patience`` (default ``BATCH_LOCK_WAIT``) for the
    transaction in flight (which may be one enqueue waiting for a row lock) leaves the
    queue and runs alone, so a lock on one actor's row never holds up another actor's
    enqueue for longer than that.
    """

    def __init__(
        self,
        commit: Callable[[Callable[[Tx], Any]], Any],
        *,
        statement: Callable[[Callable[[Tx], Any]], Any] | None = None,
        patience: float = BATCH_LOCK_WAIT,
    ) -> None:
        self._commit = commit
        #: Runs one statement as its own transaction (None: the database cannot).
        self._statement = statement
        #: How long a caller waits for the transaction in flight before running alone.
        self._patience = patience
        self._lock = threading.Lock()
        #: Whether a transaction is in flight (then arrivals wait in ``_waiting``).
        self._busy = False
        self._waiting: list[_Enqueue] = []

    def submit(
        self,
        key: Any,
        body: Callable[[Tx], T],
        one_statement: Callable[[Tx], T | None] | None = None,
    ) -> Future[T]:
        """Run ``body`` in a transaction; return once it committed or failed.

        ``key`` orders the bodies of one batch: the actor whose row ``body`` locks. A
        body that runs alone runs as ``one_statement`` in autocommit when given (and the
        database can), one round trip instead of three; in a batch, ``body`` runs.
        """
        job = _Enqueue(key, body, one_statement)
        with self._lock:
            if self._busy:
                self._waiting.append(job)
                batch: list[_Enqueue] | None = None
            else:
                self._busy = True
                batch = [job]
        if batch is None:
            if not job.woken.wait(self._patience) and self._leave(job):
                # The transaction in flight is slow (a lock wait, say): waiting behind it
                # for longer would tie this actor's enqueue to another actor's lock.
                self._alone(job)
                return job.future
            job.woken.wait()
            if job.alone:
                self._alone(job)
                return job.future
            if job.future.done():
                return job.future
            batch = job.batch
            assert batch is not None
        try:
            alone = self._run(batch)
        finally:
            for stranded in batch:  # only if this thread was interrupted mid-batch
                if not stranded.future.done() and not stranded.alone:
                    stranded.future.set_exception(RuntimeError("the enqueue was interrupted"))
                stranded.woken.set()
            with self._lock:
                following = self._waiting[:MAX_ENQUEUE_BATCH]
                del self._waiting[:MAX_ENQUEUE_BATCH]
                if not following:
                    self._busy = False
            if following:
                following[0].batch = following
                following[0].woken.set()
        if alone:
            self._alone(job)
        return job.future

    def _leave(self, job: _Enqueue) -> bool:
        """Take a waiting job out of the queue; False once a batch has taken it."""
        with self._lock:
            if any(waiting is job for waiting in self._waiting):
                self._waiting.remove(job)
                return True
            return False

    def _alone(self, job: _Enqueue) -> None:
        """Run one body in a transaction of its own, in its caller's thread."""
        try:
            if job.one_statement is not None and self._statement is not None:
                done = self._statement(job.one_statement)
                if done is not None:
                    job.future.set_result(done)
                    return
            job.future.set_result(self._commit(job.body))
        except Exception as exc:
            job.future.set_exception(exc)

    def _run(self, batch: list[_Enqueue]) -> bool:
        """Commit ``batch`` as one transaction and complete its futures; True when it
        failed and each body must run alone (the others are woken to do so)."""
        if len(batch) == 1:
            self._alone(batch[0])
            return False
        ordered = sorted(batch, key=lambda job: job.key)  # stable: arrival order per key
        deadlines = [d for d in (job.deadline for job in batch) if d is not None]
        bound = min([*deadlines, time.monotonic() + BATCH_LOCK_WAIT])
        try:
            with deadline.bounded(bound):
                results = self._commit(lambda tx: [job.body(tx) for job in ordered])
        except DatabaseError as exc:
            if exc.commit_unknown:
                for job in batch:
                    job.future.set_exception(exc)
                    job.woken.set()
                return False
            log.debug("a batch of %d enqueues failed (%r); each runs alone", len(batch), exc)
        except Exception as exc:  # each runs alone below, so that only a failing body fails
            log.debug("a batch of %d enqueues failed (%r); each runs alone", len(batch), exc)
        else:
            for job, result in zip(ordered, results, strict=True):
                job.future.set_result(result)
                job.woken.set()
            return False
        for job in batch:
            job.alone = True
        for job in batch[1:]:  # the first is this thread's own
            job.woken.set()
        return True
