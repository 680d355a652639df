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
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from sqlalchemy import Engine

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


class _Keyed:
    __slots__ = ("batch", "body", "future", "woken")

    def __init__(self, body: Callable[[Tx], Any]) -> None:
        self.body = body
        self.future: Future[Any] = Future()
        #: Set when this job's batch committed (or failed), or when it must lead one.
        self.woken = threading.Event()
        self.batch: list[_Keyed] | None = None


class KeyedBatcher:
    """The servers' group commit for one hot key: callers writing to the same actor's
    mailbox while a transaction for it is in flight join the next one.

    Each enqueue locks its actor's row until it commits, so the callers of a hot actor
    queue on that lock one transaction at a time. Here the first caller runs its
    transaction; those arriving meanwhile wait, and the first of them then runs all
    of theirs in one transaction (one lock acquisition, one ``COMMIT``), in arrival
    order. No thread runs more than one batch. A batch touches one actor row, so it
    cannot deadlock with anything a single enqueue could not. If the batch fails, each
    body runs again alone, so only a failing one fails (unless the ``COMMIT`` itself
    failed: then nobody knows what committed, and every caller gets the error).
    """

    def __init__(self, commit: Callable[[Callable[[Tx], Any]], Any]) -> None:
        self._commit = commit
        self._lock = threading.Lock()
        #: Keys with a transaction in flight -> the jobs waiting for the next one.
        self._waiting: dict[Any, list[_Keyed]] = {}

    def submit(self, key: Any, body: Callable[[Tx], T]) -> Future[T]:
        """Run ``body`` in a transaction for ``key``; return once it committed or failed."""
        job = _Keyed(body)
        with self._lock:
            queue = self._waiting.get(key)
            if queue is None:
                self._waiting[key] = []
                batch: list[_Keyed] | None = [job]
            else:
                queue.append(job)
                batch = None
        if batch is None:
            job.woken.wait()
            if job.future.done():
                return job.future
            batch = job.batch
            assert batch is not None
        try:
            self._run(batch)
        finally:
            for stranded in batch:  # only if this thread was interrupted mid-batch
                if not stranded.future.done():
                    stranded.future.set_exception(RuntimeError("the enqueue was interrupted"))
                stranded.woken.set()
            with self._lock:
                following = self._waiting[key]
                if following:
                    self._waiting[key] = []
                else:
                    del self._waiting[key]
            if following:
                following[0].batch = following
                following[0].woken.set()
        return job.future

    def _run(self, batch: list[_Keyed]) -> None:
        if len(batch) > 1:
            try:
                results = self._commit(lambda tx: [job.body(tx) for job in batch])
            except DatabaseError as exc:
                if exc.commit_unknown:
                    for job in batch:
                        job.future.set_exception(exc)
                        job.woken.set()
                    return
            except Exception:
                pass  # run each alone below, so that only a failing body fails
            else:
                for job, result in zip(batch, results, strict=True):
                    job.future.set_result(result)
                    job.woken.set()
                return
        for job in batch:
            try:
                job.future.set_result(self._commit(job.body))
            except Exception as exc:
                job.future.set_exception(exc)
            job.woken.set()
