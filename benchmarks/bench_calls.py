#!/usr/bin/env python
"""Benchmark Solid Objects calls: throughput, latency, transactions and CPU per call.

One run measures a matrix of *cells* (shape x mode x concurrency), the raw
SQLite commit limit at the same concurrencies (``raw_commit.py``, interleaved
pass by pass so "fraction of raw" is a same-pass ratio), and the idle cost of
a runtime (before the cells, and after them with the run's actors in the
database), then prints a table with the stage's targets judged, and optionally
writes JSON. Method and results: ``docs/benchmarks.md``.

Shapes (which actor identity each call goes to):

- ``hot``:  every call goes to one identity (called once before timing).
- ``warm``: calls go round-robin over ``--identities`` (100) identities, each
  called once before timing, so their activations are cached.
- ``new``:  every call goes to an identity never used before.

Modes: ``call`` is the sync call ``ref.add(n=1)`` (waits for the committed
result); ``send`` is ``ref.add.send(n=1).wait()`` (durable enqueue, then wait).

Counting (monkeypatching inside the benchmark process, measurement only): on
SQLite every write goes through the group-commit thread, and one
``GroupWriter._run_batch(raw, batch)`` is one *database* transaction holding
``len(batch)`` *logical* write transactions; on databases without group commit
each logical transaction is its own database transaction, counted by wrapping
the dialect's ``write``. SQL statements are counted with a ``sqlite3`` trace
callback (SQLite only; it counts BEGIN/SAVEPOINT/COMMIT and reads too).
Everything the process does during the timed window is counted, including
the poller's background writes. CPU is the process's user+system time
(``time.process_time``), all threads; with ``--processes`` the worker
processes' counters and CPU are added.

Examples::

    python benchmarks/bench_calls.py --quick
    python benchmarks/bench_calls.py --repeat 3 --json results.json
    python benchmarks/bench_calls.py --shapes warm --modes call --concurrency 16 --duration 5
    python benchmarks/bench_calls.py --processes 2 --concurrency 16 --shapes warm --duration 5
    python benchmarks/bench_calls.py --idle-only --idle-seconds 30
"""

from __future__ import annotations

import argparse
import collections
import functools
import itertools
import json
import math
import os
import platform
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import raw_commit
import sqlalchemy
from sqlalchemy import event
from sqlalchemy.engine import make_url

import solid_objects
from solid_objects import Actor, Runtime

SHAPES = ("hot", "warm", "new")
MODES = ("call", "send")


class BenchCounter(Actor):
    """The measured actor: one integer of state, one operation."""

    actor_type = "BenchCounter"
    value: int = 0

    def add(self, n: int = 1) -> int:
        self.value += n
        return self.value


# --- counting -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """Cumulative counters of one or more processes at one instant."""

    write_tx: int = 0
    commits: int = 0
    statements: int | None = 0
    cpu_s: float = 0.0

    def __add__(self, other: Sample) -> Sample:
        statements = (
            None
            if self.statements is None or other.statements is None
            else self.statements + other.statements
        )
        return Sample(
            self.write_tx + other.write_tx,
            self.commits + other.commits,
            statements,
            self.cpu_s + other.cpu_s,
        )

    def __sub__(self, other: Sample) -> Sample:
        statements = (
            None
            if self.statements is None or other.statements is None
            else self.statements - other.statements
        )
        return Sample(
            self.write_tx - other.write_tx,
            self.commits - other.commits,
            statements,
            self.cpu_s - other.cpu_s,
        )


def process_cpu() -> float:
    """User + system CPU seconds of this process, all threads (nanosecond clock)."""
    return time.process_time()


class Meter:
    """Counts one runtime's write transactions, database commits and SQL statements."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.write_tx = 0
        self.commits = 0
        # One cell per SQLite connection; a pooled connection is used by one thread at a
        # time, so its cell needs no lock.
        self._statement_cells: list[list[int]] | None = None
        #: Servers: statements are the process-wide count of ``Tx`` statements.
        self.process_statements = False

    def add_commit(self, logical: int) -> None:
        """One database transaction that holds ``logical`` write transactions."""
        with self._lock:
            self.write_tx += logical
            self.commits += 1

    def statement_cell(self) -> list[int]:
        cell = [0]
        with self._lock:
            if self._statement_cells is None:
                self._statement_cells = []
            self._statement_cells.append(cell)
        return cell

    def sample(self) -> Sample:
        with self._lock:
            cells = None if self._statement_cells is None else list(self._statement_cells)
            write_tx, commits = self.write_tx, self.commits
        if self.process_statements:  # a server: the process-wide Tx statement count
            statements: int | None = _TX_STATEMENTS[0]
        else:
            statements = None if cells is None else sum(c[0] for c in cells)
        return Sample(write_tx, commits, statements, process_cpu())


#: Statements run through the library's ``Tx`` in this process (servers; see instrument()).
_TX_STATEMENTS = [0]

#: ``--profile``: statements of this process by kind (a label made from the SQL text).
_PROFILE: collections.Counter[str] | None = None
_LABELS: dict[str, str] = {}
_LITERALS = re.compile(r"'[^']*'|\b\d+\b|\bx'[0-9a-f]*'")


def statement_label(sql: str) -> str:
    """A short, stable name for a statement: its first words, literals blanked."""
    label = _LABELS.get(sql)
    if label is None:
        words = " ".join(_LITERALS.sub("?", sql).split())
        label = words if len(words) <= 72 else words[:72] + "…"
        if len(_LABELS) < 10_000:
            _LABELS[sql] = label
    return label


def profile_sample() -> dict[str, Any]:
    """This process's CPU and statements by label (``--profile``), cumulative."""
    return {"cpu_s": process_cpu(), "statements": dict(_PROFILE or {})}


def profile_delta(after: dict[str, Any], before: dict[str, Any], calls: int) -> dict[str, Any]:
    """Per call between two :func:`profile_sample`s: CPU ms and statements by label."""
    per = 1 / calls if calls else math.nan
    counts = {
        k: (v - before["statements"].get(k, 0)) * per for k, v in after["statements"].items()
    }
    counts = {k: round(v, 3) for k, v in sorted(counts.items(), key=lambda kv: -kv[1]) if v}
    return {
        "cpu_ms_per_call": round((after["cpu_s"] - before["cpu_s"]) * 1000 * per, 3),
        "statements_per_call": round(sum(counts.values()), 3),
        "statements": counts,
    }


def _count_tx_statements() -> None:
    """Wrap ``Tx.run``/``row``/``rows`` once so every statement the library runs is counted.

    Servers have no trace callback; this counts the statements the runtime issues
    through its one SQL entry point (``Tx``), not the driver's BEGIN/COMMIT.
    """
    from solid_objects.store.dialect import Tx

    if getattr(Tx, "_bench_counted", False):
        return
    for name in ("run", "row", "rows"):
        original = getattr(Tx, name)

        def counted(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            _TX_STATEMENTS[0] += 1  # a racy += can lose a count under the GIL: it is a meter
            if _PROFILE is not None:
                _PROFILE[statement_label(args[0] if args else kwargs["template"])] += 1
            return _original(self, *args, **kwargs)

        setattr(Tx, name, counted)
    Tx._bench_counted = True  # type: ignore[attr-defined]


def instrument(rt: Runtime, meter: Meter, *, trace_statements: bool) -> None:
    """Wrap the runtime's store so ``meter`` counts its transactions (measurement only).

    On SQLite every write goes through the group-commit thread: one
    ``GroupWriter._run_batch(raw, batch)`` is one database transaction holding
    ``len(batch)`` logical write transactions (transaction bodies). Elsewhere
    each logical transaction is its own database transaction (``Dialect.write``,
    or ``Dialect.statement`` for a one-statement transaction).
    Call before the runtime opens its first connection, so every connection is traced.
    """
    store = rt.store
    writer = getattr(store, "_writer", None)
    if writer is not None:
        run_batch = writer._run_batch

        def counted_batch(raw: Any, batch: list[Any]) -> Any:
            meter.add_commit(len(batch))
            return run_batch(raw, batch)

        writer._run_batch = counted_batch
    else:
        # A transaction of several statements (``write``), or one statement that is
        # its own transaction (``statement``: a direct turn on PostgreSQL).
        for name in ("write", "statement"):
            original = getattr(store.dialect, name)

            @contextmanager
            def counted(
                engine: Any, render: Any, _original: Any = original, _name: str = name
            ) -> Iterator[Any]:
                meter.add_commit(1)
                if _PROFILE is not None and _name == "write":
                    _PROFILE["(COMMIT of a write transaction)"] += 1
                with _original(engine, render) as tx:
                    yield tx

            setattr(store.dialect, name, counted)

    if trace_statements and rt.engine.dialect.name != "sqlite":
        _count_tx_statements()
        meter.process_statements = True
    elif trace_statements:
        meter.statement_cell()  # statements are counted (0 until a connection opens)

        @event.listens_for(rt.engine, "connect")
        def _trace(dbapi_conn: Any, _record: Any) -> None:
            cell = meter.statement_cell()

            def count(sql: str) -> None:
                cell[0] += 1
                if _PROFILE is not None:
                    _PROFILE[statement_label(sql)] += 1

            dbapi_conn.set_trace_callback(count)


def new_runtime(
    url: str,
    *,
    workers: int,
    synchronous: str,
    trace: bool,
    call_timeout: float = 60.0,
    wakeup_url: str | None = None,
) -> tuple[Runtime, Meter]:
    """A runtime for the benchmark actor, instrumented by a fresh :class:`Meter`."""
    rt = Runtime(
        url,
        workers=workers,
        sqlite_synchronous=synchronous,
        call_timeout=call_timeout,
        wakeup_url=wakeup_url,
    )
    meter = Meter()
    instrument(rt, meter, trace_statements=trace)
    rt.register(BenchCounter)
    return rt, meter


# --- settings and results -------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    url: str
    shapes: list[str]
    modes: list[str]
    concurrency: list[int]
    calls: int
    duration: float | None
    max_cell_seconds: float
    warmup: int
    identities: int
    workers: int
    processes: int
    repeat: int
    raw_seconds: float
    idle_seconds: float
    idle_settle: float
    synchronous: str
    trace_statements: bool
    call_timeout: float
    #: The Python of the DBOS peer's virtualenv (None: no DBOS run).
    dbos_python: str | None = None
    #: Timed DBOS calls per cell (None: the same as ``calls``).
    dbos_calls: int | None = None
    #: Runtime option ``wakeup_url`` (Redis) for every runtime and worker process.
    wakeup_url: str | None = None
    #: Experiment: overrides of the library's server engine arguments (KEY=VALUE).
    engine_options: tuple[str, ...] = ()
    #: Count statements by kind and CPU per process and role (``--profile``).
    profile: bool = False
    #: Only the cells with worker processes (``--topology-only``, e.g. under a profiler).
    topology_only: bool = False

    def runtime(self, *, workers: int) -> tuple[Runtime, Meter]:
        return new_runtime(
            self.url,
            workers=workers,
            synchronous=self.synchronous,
            trace=self.trace_statements,
            call_timeout=self.call_timeout,
            wakeup_url=self.wakeup_url,
        )


@dataclass(frozen=True)
class CellRun:
    """One timed run of one cell."""

    calls: int
    errors: int
    seconds: float
    ops_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    write_tx_per_call: float
    db_commits_per_call: float
    statements_per_call: float | None
    #: Write transactions counted by the server itself (server-wide; None on SQLite).
    server_write_tx_per_call: float | None
    cpu_s_per_call: float
    cpu_cores: float
    #: ``--profile``: per role ("caller", "workers"), per process, CPU and statements.
    profile: dict[str, list[dict[str, Any]]] | None = None


@dataclass
class Cell:
    shape: str
    mode: str
    concurrency: int
    processes: int
    runs: list[CellRun] = field(default_factory=list)
    #: Same-pass ratios: run k's ops/s over raw commits/s of pass k at this concurrency.
    fractions_of_raw: list[float] = field(default_factory=list)

    @property
    def key(self) -> str:
        where = f"p{self.processes}" if self.processes else "in-process"
        return f"{self.shape}/{self.mode}/c{self.concurrency}/{where}"

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "shape": self.shape,
            "mode": self.mode,
            "concurrency": self.concurrency,
            "processes": self.processes,
            "repetitions": len(self.runs),
        }
        for name in CellRun.__dataclass_fields__:
            values = [getattr(r, name) for r in self.runs]
            if name == "profile":
                out[name] = values[len(values) // 2]
            elif any(v is None for v in values):
                out[name] = None
            elif name in ("calls", "errors"):
                out[name] = sum(values)
            else:
                out[name] = statistics.median(values)
        rates = [r.ops_per_s for r in self.runs]
        out["ops_per_s_min"] = min(rates)
        out["ops_per_s_max"] = max(rates)
        out["fraction_of_raw"] = (
            statistics.median(self.fractions_of_raw) if self.fractions_of_raw else None
        )
        out["runs"] = [asdict(r) for r in self.runs]
        return out


@dataclass(frozen=True)
class IdleRun:
    when: str
    cached_activations: int
    actors_in_database: int
    seconds: float
    cpu_s_per_s: float
    statements_per_s: float | None
    write_tx_per_s: float
    db_commits_per_s: float


# --- driving calls --------------------------------------------------------------------------


class Caller:
    """Issues the measured calls against one runtime (in-process or caller-only)."""

    def __init__(self, rt: Runtime, mode: str, timeout: float) -> None:
        self.rt = rt
        self.mode = mode
        self.timeout = timeout

    def __call__(self, actor_id: str) -> None:
        ref = self.rt.ref(BenchCounter, actor_id)
        if self.mode == "call":
            ref.add(n=1)  # waits up to the runtime's call_timeout
        else:
            ref.add.send(n=1).wait(timeout=self.timeout)


def identity_plan(shape: str, namespace: str, identities: int) -> Callable[[int], str]:
    if shape == "hot":
        return lambda k: f"{namespace}-hot"
    if shape == "warm":
        return lambda k: f"{namespace}-w{k % identities}"
    return lambda k: f"{namespace}-n{k}"


@dataclass
class Phase:
    latencies: list[float]
    errors: list[BaseException]
    seconds: float


def run_phase(
    call: Callable[[str], None],
    actor_id: Callable[[int], str],
    threads: int,
    *,
    calls: int | None,
    duration: float | None,
    limit: float = math.inf,
    before: Callable[[], None] = lambda: None,
) -> Phase:
    """Run calls from ``threads`` threads until ``calls`` are done or ``duration`` passed.

    No call starts after ``limit`` seconds either way. ``before`` runs once every
    thread is ready, right before the clock starts.
    """
    counter = itertools.count()
    per_thread: list[list[float]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads + 1)
    deadline = math.inf

    def client(index: int) -> None:
        mine = per_thread[index]
        barrier.wait()
        while True:
            k = next(counter)
            if calls is not None and k >= calls:
                return
            if time.perf_counter() >= deadline:
                return
            t0 = time.perf_counter()
            try:
                call(actor_id(k))
            except Exception as exc:
                errors.append(exc)
                if len(errors) > 10:
                    return
                continue
            mine.append(time.perf_counter() - t0)

    workers = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    before()
    start = time.perf_counter()
    deadline = start + min(limit, math.inf if duration is None else duration)
    barrier.wait()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    return Phase(sorted(x for xs in per_thread for x in xs), errors, elapsed)


@functools.cache
def server_write_counter(url: str) -> Callable[[], int] | None:
    """A server-side count of write transactions, read from the database itself.

    PostgreSQL: the next transaction id (``pg_snapshot_xmax(pg_current_snapshot())``),
    which advances once per transaction that wrote; MariaDB: ``Com_commit``. Both
    are server-wide, so anything else the server runs in the window is counted too
    (a cross-check of the in-process count, exact on a quiet server). None on SQLite.
    """
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend not in ("postgresql", "mysql", "mariadb"):
        return None
    from sqlalchemy.pool import NullPool

    engine = sqlalchemy.create_engine(url, poolclass=NullPool)
    query = (
        "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
        if backend == "postgresql"
        else "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS "
        "WHERE VARIABLE_NAME = 'COM_COMMIT'"
    )

    def read() -> int:
        with engine.connect() as conn:
            return int(conn.exec_driver_sql(query).scalar_one())

    return read


def measure_cell(
    settings: Settings,
    cell: Cell,
    rep: int,
    caller: Callable[[str], None],
    sample: Callable[[], Sample],
    profile: Callable[[], dict[str, list[dict[str, Any]]]] | None = None,
) -> CellRun:
    namespace = f"{cell.shape}-{cell.mode}-c{cell.concurrency}-p{cell.processes}-r{rep}"
    actor_id = identity_plan(cell.shape, namespace, settings.identities)
    # Prime: the hot identity, or every warm identity, runs once before timing.
    prime = {"hot": 1, "warm": settings.identities, "new": 0}[cell.shape]
    untimed: list[BaseException] = []
    if prime:
        untimed += run_phase(
            caller, actor_id, min(cell.concurrency, prime), calls=prime, duration=None
        ).errors
    # Warm-up calls in the same shape (fresh identities for "new").
    warm_ids = (
        identity_plan("new", namespace + "-warmup", settings.identities)
        if cell.shape == "new"
        else actor_id
    )
    untimed += run_phase(
        caller, warm_ids, cell.concurrency, calls=settings.warmup, duration=None
    ).errors

    marks: list[Sample] = []
    server = server_write_counter(settings.url)
    server_marks: list[int] = []

    profiles: list[dict[str, list[dict[str, Any]]]] = []

    def before() -> None:
        if server is not None:
            server_marks.append(server())
        marks.append(sample())
        if profile is not None:
            profiles.append(profile())

    phase = run_phase(
        caller,
        actor_id,
        cell.concurrency,
        calls=None if settings.duration else settings.calls,
        duration=settings.duration,
        limit=settings.max_cell_seconds,
        before=before,
    )
    delta = sample() - marks[0]
    roles = None
    if profile is not None:
        after, n_calls = profile(), len(phase.latencies)
        roles = {
            role: [
                profile_delta(a, b, n_calls)
                for a, b in zip(samples, profiles[0][role], strict=True)
            ]
            for role, samples in after.items()
        }
    server_delta = None if server is None else server() - server_marks[0]
    if phase.latencies and delta.write_tx == 0:
        raise RuntimeError(
            "the instrumentation counted no write transaction: the store's "
            "internals changed; update instrument() in this script"
        )
    failed = untimed + phase.errors
    if failed:
        print(
            f"  {cell.key}: {len(failed)} call(s) failed ({len(untimed)} before timing), "
            f"first: {failed[0]!r}",
            file=sys.stderr,
        )
    n = len(phase.latencies)
    per = 1 / n if n else math.nan
    lat = phase.latencies
    return CellRun(
        calls=n,
        errors=len(failed),
        seconds=phase.seconds,
        ops_per_s=n / phase.seconds,
        p50_ms=raw_commit.percentile(lat, 50) * 1000,
        p95_ms=raw_commit.percentile(lat, 95) * 1000,
        p99_ms=raw_commit.percentile(lat, 99) * 1000,
        max_ms=(lat[-1] if lat else math.nan) * 1000,
        write_tx_per_call=delta.write_tx * per,
        db_commits_per_call=delta.commits * per,
        statements_per_call=None if delta.statements is None else delta.statements * per,
        server_write_tx_per_call=None if server_delta is None else server_delta * per,
        cpu_s_per_call=delta.cpu_s * per,
        cpu_cores=delta.cpu_s / phase.seconds,
        profile=roles,
    )


def run_cell_in_process(settings: Settings, cell: Cell, rep: int) -> CellRun:
    """A fresh runtime with in-process workers; callers are threads of the same process."""
    rt, meter = settings.runtime(workers=settings.workers)
    with rt:
        return measure_cell(
            settings,
            cell,
            rep,
            Caller(rt, cell.mode, settings.call_timeout),
            meter.sample,
            (lambda: {"process": [profile_sample()]}) if settings.profile else None,
        )


# --- multi-process topology -----------------------------------------------------------------


class WorkerFleet:
    """``n`` worker processes (this script with ``--worker-process``), for one cell.

    Each runs ``Runtime(url, workers=...)`` with the same instrumentation and answers
    ``stats`` on stdin with its cumulative counters as one JSON line.
    """

    def __init__(self, settings: Settings, n: int) -> None:
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker-process",
            "--url",
            settings.url,
            "--workers",
            str(settings.workers),
            "--sqlite-synchronous",
            settings.synchronous,
        ]
        if settings.wakeup_url:
            command += ["--wakeup-url", settings.wakeup_url]
        for pair in settings.engine_options:
            command += ["--engine-option", pair]
        if not settings.trace_statements:
            command.append("--no-trace")
        if settings.profile:
            command.append("--profile")
        self.procs = [
            subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
            )
            for _ in range(n)
        ]
        for p in self.procs:
            line = self._readline(p)
            if line != "ready":
                self.close()
                raise RuntimeError(f"worker process did not start (said {line!r})")

    @staticmethod
    def _readline(p: subprocess.Popen[str]) -> str:
        assert p.stdout is not None
        return p.stdout.readline().strip()

    def profile(self) -> list[dict[str, Any]]:
        """Each process's :func:`profile_sample` (``--profile``)."""
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write("profile\n")
        return [json.loads(self._readline(p)) for p in self.procs]

    def sample(self) -> Sample:
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write("stats\n")
        total = Sample()
        for p in self.procs:
            total = total + Sample(**json.loads(self._readline(p)))
        return total

    def close(self) -> None:
        for p in self.procs:
            try:
                assert p.stdin is not None
                p.stdin.write("quit\n")
                p.stdin.close()
            except (BrokenPipeError, OSError):
                pass
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            if p.stdout is not None:
                p.stdout.close()


def run_cell_processes(settings: Settings, cell: Cell, rep: int) -> CellRun:
    """``--processes N`` worker processes plus this process as a caller (``workers=0``)."""
    fleet = WorkerFleet(settings, cell.processes)
    try:
        rt, meter = settings.runtime(workers=0)
        with rt:
            return measure_cell(
                settings,
                cell,
                rep,
                Caller(rt, cell.mode, settings.call_timeout),
                lambda: meter.sample() + fleet.sample(),
                (lambda: {"caller": [profile_sample()], "workers": fleet.profile()})
                if settings.profile
                else None,
            )
    finally:
        fleet.close()


def worker_process_main(
    url: str, workers: int, synchronous: str, trace: bool, wakeup_url: str | None = None
) -> int:
    """Body of a ``--worker-process``: run workers; answer ``stats``; stop on ``quit``/EOF."""
    rt, meter = new_runtime(
        url, workers=workers, synchronous=synchronous, trace=trace, wakeup_url=wakeup_url
    )
    with rt:
        print("ready", flush=True)
        for line in sys.stdin:
            command = line.strip()
            if command == "stats":
                print(json.dumps(asdict(meter.sample())), flush=True)
            elif command == "profile":
                print(json.dumps(profile_sample()), flush=True)
            elif command == "quit":
                break
    return 0


# --- idle cost ------------------------------------------------------------------------------


def count_actors(rt: Runtime) -> int:
    with rt.engine.connect() as conn:
        table = f"{rt.options.table_prefix}actors"
        return int(conn.exec_driver_sql(f"SELECT COUNT(*) FROM {table}").scalar_one())


def measure_idle(settings: Settings, cached: int, when: str) -> IdleRun:
    """CPU and statements per second of a runtime with workers and nothing to do.

    With ``cached`` > 0, that many identities are called first, so the process holds
    their leases and cached activations while idle (renewals and idle release happen).
    """
    rt, meter = settings.runtime(workers=settings.workers)
    actors = count_actors(rt)
    with rt:
        if cached:
            run_phase(
                Caller(rt, "call", settings.call_timeout),
                identity_plan("warm", f"idle-{cached}-{time.time_ns()}", cached),
                min(cached, 16),
                calls=cached,
                duration=None,
            )
        time.sleep(settings.idle_settle)
        before, t0 = meter.sample(), time.perf_counter()
        time.sleep(settings.idle_seconds)
        delta, elapsed = meter.sample() - before, time.perf_counter() - t0
    return IdleRun(
        when=when,
        cached_activations=cached,
        actors_in_database=actors + cached,
        seconds=elapsed,
        cpu_s_per_s=delta.cpu_s / elapsed,
        statements_per_s=None if delta.statements is None else delta.statements / elapsed,
        write_tx_per_s=delta.write_tx / elapsed,
        db_commits_per_s=delta.commits / elapsed,
    )


# --- the run --------------------------------------------------------------------------------


def sqlite_path(url: str) -> Path | None:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return None
    return Path(parsed.database)


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args],
            capture_output=True,
            text=True,
            # The tree of the library this process imported (a before/after run
            # imports another worktree's library with this harness).
            cwd=Path(solid_objects.__file__).resolve().parent,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "sqlite_library": sqlite3.sqlite_version,
        "sqlalchemy": sqlalchemy.__version__,
        "solid_objects": getattr(solid_objects, "__version__", None),
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        # Uncommitted changes to the library: the numbers are of the working tree.
        "git_src_dirty": None
        if (st := _git("status", "--porcelain", "--", ":/src")) is None
        else bool(st),
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


#: The JS reference's published sync calls/s at 100 warm identities, concurrency 16, one
#: process, as the issue quotes them (perf-baseline.md Part 1 has 56.7 and 41.3 for
#: warm-many, 37.9 for warm-hot on PostgreSQL). It has no MySQL/MariaDB adapter.
JS_ANCHOR = {"sqlite": 57.0, "postgresql": 39.0}


def evaluate_targets(
    cells: list[dict[str, Any]], backend: str = "sqlite", dbos: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The issue's targets at 100 warm identities, concurrency 16, sync calls, one process.

    A target whose reference is absent from the run (no DBOS run, no JS figure for
    MariaDB, no raw limit) has ``met`` None.
    """

    def find(shape: str, mode: str, concurrency: int) -> dict[str, Any] | None:
        for c in cells:
            if (c["shape"], c["mode"], c["concurrency"], c["processes"]) == (
                shape,
                mode,
                concurrency,
                0,
            ):
                return c
        return None

    warm16 = find("warm", "call", 16)
    ops = None if warm16 is None else warm16["ops_per_s"]
    targets: list[dict[str, Any]] = []

    def add(target: str, measured: float | None, unit: str, met: bool | None) -> None:
        targets.append({"target": target, "measured": measured, "unit": unit, "met": met})

    fraction = None if warm16 is None else warm16["fraction_of_raw"]
    add(
        ">= 50% of the raw single-transaction commit rate (same run)",
        fraction,
        "fraction of raw commits/s (warm/call/c16)",
        None if fraction is None else fraction >= 0.5,
    )
    p99 = None if warm16 is None else warm16["p99_ms"]
    add("p99 < 50 ms", p99, "ms p99 (warm/call/c16)", None if p99 is None else p99 < 50)
    js = JS_ANCHOR.get(backend)
    js_ratio = None if ops is None or js is None else ops / js
    add(
        ">= 20x the JS reference",
        js_ratio,
        f"x the JS reference's {js} calls/s (warm/call/c16)"
        if js
        else "x the JS reference (it has no figure for this database)",
        None if js_ratio is None else js_ratio >= 20,
    )
    dbos_cell = (
        None
        if dbos is None
        else next(
            (c for c in dbos["cells"] if (c["shape"], c["concurrency"]) == ("warm", 16)), None
        )
    )
    dbos_ratio = (
        None
        if ops is None or dbos_cell is None or not dbos_cell["ops_per_s"]
        else ops / dbos_cell["ops_per_s"]
    )
    add(
        ">= 10x DBOS (same run)",
        dbos_ratio,
        "x DBOS workflows/s (warm/c16)" if dbos_cell else "x DBOS (not run on this database)",
        None if dbos_ratio is None else dbos_ratio >= 10,
    )
    in_process = [c for c in cells if c["processes"] == 0]
    worst = max(in_process, key=lambda c: c["write_tx_per_call"], default=None)
    add(
        "at most 2 write transactions per call from a process running workers",
        None if worst is None else worst["write_tx_per_call"],
        "logical write transactions per call (worst in-process cell: "
        + ("-" if worst is None else f"{worst['shape']}/{worst['mode']}/c{worst['concurrency']}")
        + ")",
        # Judged at two decimals: background maintenance (a lease renewal every
        # lease_duration/3) amortized over thousands of calls is not the call path.
        None if worst is None else round(worst["write_tx_per_call"], 2) <= 2.0,
    )
    return targets


def server_version(url: str) -> str | None:
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        return sqlite3.sqlite_version
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            return str(conn.exec_driver_sql("SELECT version()").scalar_one())
    finally:
        engine.dispose()


def run_dbos(settings: Settings, backend: str) -> dict[str, Any] | None:
    """The DBOS peer (``bench_dbos.py``) in its own virtualenv, same shapes and concurrency.

    DBOS runs on SQLite (a temporary file, WAL) and PostgreSQL (a fresh database on
    the same server); it has no MySQL/MariaDB system database, so there it is skipped.
    A DBOS run that finishes no cell for ``cell budget`` seconds is killed (it stalled:
    DBOS on SQLite at concurrency 64 does); the cells it finished are kept and the
    rest are reported with ``stalled`` true and no numbers.
    """
    if backend not in ("sqlite", "postgresql"):
        print(
            f"dbos: skipped on {backend} (DBOS supports SQLite and PostgreSQL only)",
            file=sys.stderr,
        )
        return None
    work = Path(tempfile.mkdtemp(prefix="solid-bench-dbos-"))
    out = work / "dbos.json"
    db_name = f"bench_dbos_{os.getpid()}_{time.time_ns() % 10**9}"
    server = None if backend == "sqlite" else make_url(settings.url).set(query={})
    command = [
        str(settings.dbos_python),
        str(Path(__file__).resolve().parent / "bench_dbos.py"),
        "--url",
        "sqlite" if server is None else server.render_as_string(hide_password=False),
        "--shapes",
        ",".join(settings.shapes),
        "--concurrency",
        ",".join(map(str, settings.concurrency)),
        "--warmup",
        str(settings.warmup),
        "--identities",
        str(settings.identities),
        "--json",
        str(out),
        "--workdir",
        str(work),
        "--db-name",
        db_name,
    ]
    calls = settings.dbos_calls or settings.calls
    command += (
        ["--duration", str(settings.duration)] if settings.duration else ["--calls", str(calls)]
    )
    budget = 60 + (settings.duration or calls / 20) + settings.warmup / 10
    print(f"dbos: {' '.join(command[1:])}", file=sys.stderr)
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    done_cells, last_progress, stalled = 0, time.monotonic(), False
    try:
        while proc.poll() is None:
            time.sleep(2)
            cells = len(json.loads(out.read_text())["cells"]) if out.exists() else 0
            if cells > done_cells:
                done_cells, last_progress = cells, time.monotonic()
            elif time.monotonic() - last_progress > budget:
                print(
                    f"dbos: no cell finished in {budget:.0f} s: killing the DBOS run",
                    file=sys.stderr,
                )
                stalled = True
                proc.kill()
                proc.wait()
        if not out.exists():
            print(f"dbos: the DBOS run failed (exit {proc.returncode})", file=sys.stderr)
            return None
        result: dict[str, Any] = json.loads(out.read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if server is not None and stalled:
            admin = sqlalchemy.create_engine(server, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {db_name} WITH (FORCE)")
            admin.dispose()
    finished = {(c["shape"], c["concurrency"]) for c in result["cells"]}
    for conc in settings.concurrency:
        for shape in settings.shapes:
            if (shape, conc) not in finished:
                result["cells"].append(
                    {
                        "shape": shape,
                        "concurrency": conc,
                        "stalled": True,
                        "calls": 0,
                        "errors": 0,
                        "ops_per_s": None,
                        "p50_ms": None,
                        "p95_ms": None,
                        "p99_ms": None,
                        "commits_per_call": None,
                        "cpu_s_per_call": None,
                    }
                )
    return result


def fmt(value: float | None, spec: str) -> str:
    return (
        "-"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else format(value, spec)
    )


def print_cells(cells: list[dict[str, Any]], raw: dict[int, dict[str, Any]]) -> None:
    header = (
        f"{'shape':<5} {'mode':<4} {'conc':>4} {'proc':>4} {'ops/s':>7} {'(min-max)':>13} "
        f"{'p50':>6} {'p95':>6} {'p99':>7} {'wtx':>5} {'commit':>6} {'srv':>5} {'stmt':>5} "
        f"{'cpu ms':>6} {'raw/s':>7} {'of raw':>6}"
    )
    print()
    print(
        "latency in ms; wtx = logical write transactions per call; commit = database "
        "commits per call;"
    )
    print(
        "srv = write transactions per call counted by the server (server-wide); "
        "stmt = SQL statements per call;"
    )
    print("cpu ms = process CPU per call (all processes); of raw = ops/s / raw commits/s")
    print(header)
    print("-" * len(header))
    for c in cells:
        r = raw.get(c["concurrency"])
        spread = f"({c['ops_per_s_min']:.0f}-{c['ops_per_s_max']:.0f})"
        print(
            f"{c['shape']:<5} {c['mode']:<4} {c['concurrency']:>4} {c['processes']:>4} "
            f"{c['ops_per_s']:>7.0f} {spread:>13} {c['p50_ms']:>6.2f} {c['p95_ms']:>6.2f} "
            f"{c['p99_ms']:>7.2f} {c['write_tx_per_call']:>5.2f} "
            f"{c['db_commits_per_call']:>6.2f} {fmt(c['server_write_tx_per_call'], '>5.2f')} "
            f"{fmt(c['statements_per_call'], '>5.1f')} "
            f"{c['cpu_s_per_call'] * 1000:>6.3f} "
            f"{fmt(None if r is None else r['commits_per_s'], '>7.0f')} "
            f"{fmt(c['fraction_of_raw'], '>6.3f')}"
        )
        if c["errors"]:
            print(f"      ^ {c['errors']} failed call(s)")


def print_profile(roles: dict[str, list[dict[str, Any]]]) -> None:
    """Per role: CPU ms and statements per call, summed over its processes, by kind."""
    for role, processes in roles.items():
        cpu = sum(p["cpu_ms_per_call"] for p in processes)
        statements: collections.Counter[str] = collections.Counter()
        for p in processes:
            statements.update(p["statements"])
        per_process = " / ".join(f"{p['cpu_ms_per_call']:.2f}" for p in processes)
        print(
            f"    {role} ({len(processes)} process(es)): {cpu:.2f} CPU ms/call "
            f"({per_process}), {sum(statements.values()):.2f} statements/call",
            file=sys.stderr,
        )
        for label, n in statements.most_common():
            if n >= 0.005:
                print(f"      {n:7.3f}  {label}", file=sys.stderr)


def print_report(report: dict[str, Any]) -> None:
    m = report["machine"]
    s = report["settings"]
    print()
    dirty = " + uncommitted changes" if m["git_src_dirty"] else ""
    print(
        f"Solid Objects {m['solid_objects']} ({m['git_commit']}{dirty}), Python {m['python']}, "
        f"SQLite {m['sqlite_library']}, SQLAlchemy {m['sqlalchemy']}, "
        f"{m['cpus_usable']} CPUs"
    )
    print(f"database: {report['database']} {report['server_version']}")
    load = [f"{x:.1f}" for x in m["load_average"] or ()]
    load_end = [f"{x:.1f}" for x in m["load_average_end"] or ()]
    print(f"load average (1/5/15 min) at start {'/'.join(load)}, at end {'/'.join(load_end)}")
    amount = f"{s['duration']:g} s" if s["duration"] else f"{s['calls']} calls"
    print(
        f"database {s['url']}, workers={s['workers']}, synchronous={s['synchronous']}, "
        f"{amount} per cell, warm-up {s['warmup']}, {s['repeat']} repetition(s): medians"
    )
    raw = {r["threads"]: r for r in report["raw"]}
    if report["cells"]:
        print_cells(report["cells"], raw)
    if report["raw"]:
        print()
        if report["database"] == "sqlite":
            print(
                f"raw limit (stdlib sqlite3, BEGIN IMMEDIATE + INSERT 64 B + UPDATE + COMMIT, "
                f"WAL, synchronous={s['synchronous']}):"
            )
        else:
            print(
                f"raw limit ({report['database']}, the library's driver, one connection per "
                "thread: INSERT 64 B + UPDATE + COMMIT):"
            )
        for r in report["raw"]:
            print(
                f"  {r['threads']:>3} threads: {r['commits_per_s']:>8.0f} commits/s "
                f"(min {r['commits_per_s_min']:.0f}, max {r['commits_per_s_max']:.0f}), "
                f"tx p50 {r['p50_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms"
            )
    if report["idle"]:
        print()
        print(
            f"idle runtime ({s['workers']} workers, nothing to do, {s['idle_seconds']:g} s "
            f"after {s['idle_settle']:g} s settling):"
        )
        for i in report["idle"]:
            print(
                f"  {i['when']:<6} {i['cached_activations']:>3} cached activations, "
                f"{i['actors_in_database']:>6} actors in the database: "
                f"{i['cpu_s_per_s'] * 1000:.2f} ms CPU/s, "
                f"{fmt(i['statements_per_s'], '.1f')} statements/s, "
                f"{i['write_tx_per_s']:.2f} write tx/s, {i['db_commits_per_s']:.2f} commits/s"
            )
    if report.get("dbos"):
        d = report["dbos"]
        print()
        print(f"DBOS {d['dbos']} peer on {d['database']} ({d['workload']}):")
        for c in d["cells"]:
            if c.get("stalled"):
                print(
                    f"  {c['shape']:<5} c{c['concurrency']:<3} stalled: no result "
                    "(killed after making no progress)"
                )
                continue
            print(
                f"  {c['shape']:<5} c{c['concurrency']:<3} {c['ops_per_s']:>7.0f} ops/s, "
                f"p50 {c['p50_ms']:.2f} ms, p95 {c['p95_ms']:.2f} ms, "
                f"p99 {c['p99_ms']:.2f} ms, {c['commits_per_call']:.2f} commits/call, "
                f"{c['cpu_s_per_call'] * 1000:.2f} ms CPU/call"
            )
    if report["cells"]:
        print()
        print("targets (100 warm identities, concurrency 16, sync calls, one process):")
        for t in report["targets"]:
            verdict = {True: "MET", False: "NOT MET", None: "not measured"}[t["met"]]
            print(f"  [{verdict}] {t['target']}: {fmt(t['measured'], '.3f')} {t['unit']}")


def summarize_raw(runs: list[raw_commit.RawResult]) -> list[dict[str, Any]]:
    out = []
    for threads in sorted({r.threads for r in runs}):
        mine = [r for r in runs if r.threads == threads]
        rates = [r.commits_per_s for r in mine]
        out.append(
            {
                "threads": threads,
                "synchronous": mine[0].synchronous,
                "commits_per_s": statistics.median(rates),
                "commits_per_s_min": min(rates),
                "commits_per_s_max": max(rates),
                "p50_ms": statistics.median(r.p50_ms for r in mine),
                "p99_ms": statistics.median(r.p99_ms for r in mine),
                "cpu_s_per_commit": statistics.median(r.cpu_s_per_commit for r in mine),
                "runs": [asdict(r) for r in mine],
            }
        )
    return out


def run(settings: Settings, display_url: str) -> dict[str, Any]:
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    about = machine()  # the code this process imported, and the load when it started
    setup_rt = Runtime(settings.url, workers=0)
    setup_rt.install()
    setup_rt.close()

    db_file = sqlite_path(settings.url)
    raw_dir = None
    measure_raw: Callable[[int], raw_commit.RawResult] | None = None
    if db_file is not None and settings.raw_seconds > 0:
        raw_dir = Path(tempfile.mkdtemp(prefix="solid-bench-raw-", dir=db_file.parent))
        measure_raw = functools.partial(
            raw_commit.measure,
            raw_dir,
            seconds=settings.raw_seconds,
            synchronous=settings.synchronous,
        )
    elif settings.raw_seconds > 0:
        measure_raw = functools.partial(
            raw_commit.measure_url, settings.url, seconds=settings.raw_seconds
        )

    idle: list[IdleRun] = []
    if settings.idle_seconds > 0:
        # On the freshly installed database, then again after the calls (more actors).
        idle.append(measure_idle(settings, 0, "before"))
        idle.append(measure_idle(settings, settings.identities, "before"))

    topologies = [] if settings.topology_only else [0]
    topologies += [settings.processes] if settings.processes else []
    cells = [
        Cell(shape, mode, conc, procs)
        for procs in topologies
        for conc in settings.concurrency
        for shape in settings.shapes
        for mode in settings.modes
    ]
    raw_runs: list[raw_commit.RawResult] = []
    try:
        for rep in range(settings.repeat):
            # Interleaved passes: the raw limit at a concurrency, then that concurrency's cells.
            for conc in settings.concurrency:
                raw_rate = None
                if measure_raw is not None:
                    r = measure_raw(conc)
                    raw_runs.append(r)
                    raw_rate = r.commits_per_s
                    print(
                        f"[pass {rep + 1}] raw c{conc}: {r.commits_per_s:,.0f} commits/s",
                        file=sys.stderr,
                    )
                for cell in cells:
                    if cell.concurrency != conc:
                        continue
                    if cell.processes:
                        result = run_cell_processes(settings, cell, rep)
                    else:
                        result = run_cell_in_process(settings, cell, rep)
                    cell.runs.append(result)
                    if raw_rate:
                        cell.fractions_of_raw.append(result.ops_per_s / raw_rate)
                    print(
                        f"[pass {rep + 1}] {cell.key}: {result.ops_per_s:,.0f} ops/s, "
                        f"p50 {result.p50_ms:.2f} ms, {result.write_tx_per_call:.2f} wtx/call",
                        file=sys.stderr,
                    )
                    if result.profile is not None:
                        print_profile(result.profile)
    finally:
        if raw_dir is not None:
            shutil.rmtree(raw_dir, ignore_errors=True)
    if settings.idle_seconds > 0 and cells:
        idle.append(measure_idle(settings, 0, "after"))
    backend = make_url(settings.url).get_backend_name()
    dbos = run_dbos(settings, backend) if settings.dbos_python else None

    summaries = [c.summary() for c in cells]
    settings_out = asdict(settings)
    settings_out["url"] = display_url
    return {
        "benchmark": "solid-objects calls",
        "database": backend,
        "server_version": server_version(settings.url),
        "started": started,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {**about, "load_average_end": machine()["load_average"]},
        "settings": settings_out,
        "raw": summarize_raw(raw_runs),
        "cells": summaries,
        "idle": [asdict(i) for i in idle],
        "dbos": dbos,
        "targets": evaluate_targets(summaries, backend, dbos),
    }


# --- command line ---------------------------------------------------------------------------


def _choices(allowed: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        values = [v.strip() for v in text.split(",") if v.strip()]
        bad = [v for v in values if v not in allowed]
        if not values or bad:
            raise argparse.ArgumentTypeError(f"choose from {','.join(allowed)}; got {text!r}")
        return values

    return parse


QUICK = {
    "shapes": list(SHAPES),
    "modes": list(MODES),
    "concurrency": [1, 16],
    "calls": 150,
    "warmup": 20,
    "raw_seconds": 0.25,
    "idle_seconds": 1.0,
    "idle_settle": 0.3,
    "repeat": 1,
    "call_timeout": 15.0,
}
FULL = {
    "shapes": list(SHAPES),
    "modes": list(MODES),
    "concurrency": [1, 16, 64],
    "calls": 2000,
    "warmup": 200,
    "raw_seconds": 2.0,
    "idle_seconds": 15.0,
    "idle_settle": 1.5,
    "repeat": 1,
    "call_timeout": 60.0,
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Measure Solid Objects calls: ops/s, latency percentiles, write "
        "transactions, commits, statements and CPU per call, against the raw "
        "SQLite commit limit.",
        epilog="Defaults are the full matrix; --quick is a smoke run of a few seconds.",
    )
    p.add_argument(
        "--url", help="database URL (default: a temporary SQLite file, removed afterwards)"
    )
    p.add_argument(
        "--quick", action="store_true", help="a small matrix that finishes in well under 20 s"
    )
    p.add_argument("--shapes", type=_choices(SHAPES), help="comma-separated: hot,warm,new")
    p.add_argument("--modes", type=_choices(MODES), help="comma-separated: call,send")
    p.add_argument(
        "--concurrency",
        type=raw_commit.int_list,
        help="caller threads, comma-separated (default 1,16,64)",
    )
    p.add_argument("--calls", type=int, help="timed calls per cell (default 2000)")
    p.add_argument(
        "--duration", type=float, help="timed seconds per cell instead of a number of calls"
    )
    p.add_argument(
        "--max-cell-seconds",
        type=float,
        default=60.0,
        help="stop a cell's timed phase after this many seconds even if calls remain (default 60)",
    )
    p.add_argument("--warmup", type=int, help="untimed calls per cell before timing")
    p.add_argument("--identities", type=int, default=100, help="identities of the warm shape")
    p.add_argument("--workers", type=int, default=4, help="worker threads per runtime")
    p.add_argument(
        "--processes",
        type=int,
        default=0,
        help="also run every cell with N worker processes and a caller-only (workers=0) process",
    )
    p.add_argument(
        "--topology-only",
        action="store_true",
        help="with --processes: run only the worker-process cells (e.g. under py-spy)",
    )
    p.add_argument("--repeat", type=int, help="repetitions (passes); the table shows medians")
    p.add_argument(
        "--raw-seconds",
        type=float,
        help="seconds per raw-limit measurement (0 skips it; SQLite only)",
    )
    p.add_argument(
        "--idle-seconds", type=float, help="seconds of the idle measurement (0 skips it)"
    )
    p.add_argument(
        "--idle-only",
        action="store_true",
        help="measure only the idle cost (no calls, no raw limit)",
    )
    p.add_argument(
        "--idle-settle",
        type=float,
        help="seconds an idle runtime runs before its idle cost is measured",
    )
    p.add_argument(
        "--sqlite-synchronous",
        choices=["NORMAL", "FULL"],
        default="NORMAL",
        help="runtime option sqlite_synchronous (also used for the raw limit)",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="count statements by kind and CPU per process and role (caller, workers); "
        "printed per cell and kept in the JSON",
    )
    p.add_argument(
        "--no-trace",
        action="store_true",
        help="do not count SQL statements (removes the trace callback's overhead)",
    )
    p.add_argument(
        "--call-timeout",
        type=float,
        help="seconds a call may wait before it counts as failed (default 60; 15 with --quick)",
    )
    p.add_argument(
        "--dbos-python",
        help="the python of a virtualenv with benchmarks/requirements-peer.txt: "
        "also run the DBOS peer (SQLite and PostgreSQL)",
    )
    p.add_argument("--dbos-calls", type=int, help="timed DBOS calls per cell (default: --calls)")
    p.add_argument(
        "--wakeup-url",
        help="runtime option wakeup_url (e.g. redis://127.0.0.1:6379/0) for every "
        "runtime and worker process: cross-process wake-ups without polling",
    )
    p.add_argument(
        "--engine-option",
        action="append",
        metavar="KEY=VALUE",
        help="experiment: override the library's server engine argument KEY (VALUE as JSON), "
        "e.g. pool_size=64 or pool_pre_ping=false; repeatable; also in worker processes",
    )
    p.add_argument("--json", type=Path, help="write the full report as JSON here")
    p.add_argument("--worker-process", action="store_true", help=argparse.SUPPRESS)
    return p


def override_engine_options(pairs: list[str]) -> dict[str, Any]:
    """An experiment: change the library's server engine settings from outside.

    ``KEY=VALUE`` pairs (VALUE as JSON: ``64``, ``false``) are added to the keyword
    arguments the library passes to ``create_engine`` for PostgreSQL and MySQL/MariaDB
    (``solid_objects.database``; ``solid_objects.runtime`` in older trees), e.g.
    ``pool_size=64`` or ``pool_pre_ping=false``. Nothing under ``src/`` changes; the
    report records the overrides.
    """
    import importlib

    module: Any = None
    for name in ("solid_objects.database", "solid_objects.runtime"):
        try:
            candidate = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(candidate, "create_engine"):
            module = candidate
            break

    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--engine-option wants KEY=VALUE, got {pair!r}")
        overrides[key] = json.loads(value)
    if not overrides:
        return overrides
    if module is None:
        raise SystemExit("--engine-option: no create_engine in the library to override")
    original = getattr(module, "create_engine")  # noqa: B009 (not exported)

    def patched(url: Any, **kwargs: Any) -> Any:
        if make_url(url).get_backend_name() != "sqlite":
            kwargs.update(overrides)
        return original(url, **kwargs)

    setattr(module, "create_engine", patched)  # noqa: B010 (not exported)
    return overrides


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    override_engine_options(args.engine_option or [])
    if args.profile:
        global _PROFILE
        _PROFILE = collections.Counter()
    if args.worker_process:
        return worker_process_main(
            args.url, args.workers, args.sqlite_synchronous, not args.no_trace, args.wakeup_url
        )
    # SIGTERM unwinds like Ctrl-C, so the temporary database is still removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    base = QUICK if args.quick else FULL

    def pick(name: str) -> Any:
        value = getattr(args, name)
        return base[name] if value is None else value

    for name in ("calls", "warmup", "repeat", "identities", "workers", "processes"):
        value = getattr(args, name)
        if value is not None and value < (0 if name in ("warmup", "processes") else 1):
            raise SystemExit(f"--{name} must be positive")

    temp_dir = None
    url = args.url
    if url is None:
        temp_dir = Path(tempfile.mkdtemp(prefix="solid-bench-"))
        url = f"sqlite:///{temp_dir / 'bench.db'}"
    display_url = make_url(url).render_as_string(hide_password=True)
    settings = Settings(
        url=url,
        shapes=[] if args.idle_only else pick("shapes"),
        modes=pick("modes"),
        concurrency=pick("concurrency"),
        calls=pick("calls"),
        duration=args.duration,
        max_cell_seconds=args.max_cell_seconds,
        warmup=pick("warmup"),
        identities=args.identities,
        workers=args.workers,
        processes=args.processes,
        topology_only=args.topology_only,
        repeat=pick("repeat"),
        raw_seconds=0 if args.idle_only else pick("raw_seconds"),
        idle_seconds=pick("idle_seconds"),
        idle_settle=pick("idle_settle"),
        synchronous=args.sqlite_synchronous,
        trace_statements=not args.no_trace,
        call_timeout=pick("call_timeout"),
        dbos_python=args.dbos_python,
        dbos_calls=args.dbos_calls,
        wakeup_url=args.wakeup_url,
        engine_options=tuple(args.engine_option or ()),
        profile=args.profile,
    )
    try:
        report = run(settings, display_url if args.url else "temporary SQLite file")
    finally:
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
    print_report(report)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"\nwrote {args.json}")
    failed = sum(c["errors"] for c in report["cells"])
    if failed:
        print(f"{failed} call(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
