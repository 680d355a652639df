"""Storage faults on SQLite: a read-only database and a full disk.

Both must give a clear, typed error (``DatabaseError``, with SQLite's own reason in
the message), corrupt nothing (``PRAGMA integrity_check`` is ``ok`` and every
committed state is intact) and lose no acknowledged work: once the disk has space
again, the same runtime carries on, and a message that was enqueued before the
disk filled runs exactly once.

The read-only database is opened with SQLite's ``mode=ro`` URI, which refuses
writes even to root (a ``chmod`` does not). The full disk is a real one: a small
tmpfs mounted for the test (root only; CI runs as root) and filled up, so SQLite
gets ``ENOSPC`` from the kernel exactly as it would on a full volume.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from solid_objects import Actor, EffectContext, Runtime
from solid_objects.errors import DatabaseError

from .conftest import FAST

T = TypeVar("T")
STEP = 20.0


class Box(Actor):
    """``data`` grows by ``kb`` KiB per call, so a turn's commit can need real space."""

    data: str = ""
    calls: int = 0

    def grow(self, kb: int = 0) -> int:
        self.data += "x" * (kb * 1024)
        self.calls += 1
        return self.calls

    def note(self, text: str) -> int:
        return len(text)

    def mail(self, to: str) -> None:
        self.emit("send", to=to)


def wait_until(predicate: Callable[[], T], what: str, timeout: float = STEP) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)


def integrity(path: Path) -> list[Any]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchall()
    finally:
        conn.close()


def rows(rt: Runtime, sql: str) -> list[tuple[Any, ...]]:
    with rt.store.read() as tx:
        return [tuple(r) for r in tx.rows(sql)]


# --- a read-only database ------------------------------------------------------------------


def test_read_only_database_refuses_writes_with_a_database_error_and_keeps_its_state(
    tmp_path: Path,
) -> None:
    path = tmp_path / "app.db"
    writable = Runtime(f"sqlite:///{path}", workers=0, **FAST)
    writable.install()
    first = writable.ref(Box, "b").grow.send(kb=1)
    writable.testing.drain()
    assert first.result() == 1
    writable.close()

    ro = Runtime(f"sqlite:///file:{path}?mode=ro&uri=true", workers=1, **FAST)
    try:
        box = ro.ref(Box, "b")
        assert box.snapshot()["calls"] == 1  # reads work
        assert first.id in {r[0] for r in rows(ro, "SELECT id FROM solid_messages")}
        with pytest.raises(DatabaseError, match="readonly database") as caught:
            box.grow.send(kb=0)
        assert isinstance(caught.value.orig, sqlite3.OperationalError)
        ro.start()  # workers that cannot write log and keep going; they do not crash
        with pytest.raises(DatabaseError, match="readonly database"):
            box.grow(kb=0)
        with pytest.raises(DatabaseError, match="readonly database"):
            ro.ref(Box, "other").grow.send()
        assert box.snapshot()["calls"] == 1
    finally:
        ro.close()

    assert integrity(path) == [("ok",)]
    again = Runtime(f"sqlite:///{path}", workers=0, **FAST)
    try:
        assert again.ref(Box, "b").snapshot()["calls"] == 1
        assert rows(again, "SELECT COUNT(*) FROM solid_messages") == [(1,)]
        later = again.ref(Box, "b").grow.send()
        again.testing.drain()
        assert later.result() == 2
    finally:
        again.close()


# --- a full disk -------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs: a real filesystem that runs out of space."""
    if os.geteuid() != 0:
        if os.environ.get("SOLID_TEST_REQUIRE_SERVERS") == "1":
            pytest.fail("mounting a tmpfs needs root: in CI (as root) this test must run")
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0755", "tmpfs", str(mount)],
        check=True,
        capture_output=True,
    )
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True, capture_output=True)


def fill(disk: Path) -> Path:
    """Write a file until the filesystem reports ENOSPC; return it (shrink it to free)."""
    filler = disk / "filler"
    # Unbuffered: a buffered file keeps the bytes a full disk refused and raises
    # ENOSPC again when it is closed, whenever the free space is not a whole chunk.
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError as exc:
            assert exc.errno == 28, exc  # ENOSPC
    assert os.statvfs(disk).f_bavail == 0
    return filler


def test_full_disk_gives_a_database_error_corrupts_nothing_and_recovers(
    small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = small_disk / "app.db"
    url = f"sqlite:///{path}"
    caller = Runtime(url, workers=0, **FAST)
    caller.install()
    box = caller.ref(Box, "b")
    first = box.grow.send(kb=1)
    caller.testing.drain()
    assert first.result() == 1
    # Enqueued (acknowledged) before the disk fills; its turn needs 600 KiB to commit.
    pending = box.grow.send(kb=600)
    messages_before = rows(caller, "SELECT id, status FROM solid_messages ORDER BY id")

    filler = fill(small_disk)
    with pytest.raises(DatabaseError, match="disk is full") as caught:
        box.grow.send(kb=0)
    assert isinstance(caught.value.orig, sqlite3.OperationalError)
    with pytest.raises(DatabaseError, match="disk is full"):
        caller.ref(Box, "new").grow.send(kb=0)
    assert rows(caller, "SELECT id, status FROM solid_messages ORDER BY id") == messages_before

    # Almost full: small writes (a claim) fit, the 600 KiB turn's commit does not.
    os.truncate(filler, os.path.getsize(filler) - 256 * 1024)
    with pytest.raises(DatabaseError, match="disk is full"):
        box.note.send(text="y" * 400 * 1024)
    assert rows(caller, "SELECT id, status FROM solid_messages ORDER BY id") == messages_before

    caplog.set_level(logging.WARNING, logger="solid_objects")
    caplog.clear()
    worker = Runtime(url, workers=1, max_attempts=2, **FAST)
    worker.register(Box)
    worker.start()

    def failed_commits() -> int:
        return sum("turns failed; they will run again" in r.getMessage() for r in caplog.records)

    try:
        # The turn ran and its commit failed, more often than max_attempts: a full
        # disk must not use up the message's attempts and make it a dead letter.
        wait_until(lambda: failed_commits() > 3, "the worker's commit to hit the full disk")
        assert any("disk is full" in str(r.exc_info) for r in caplog.records)
        # Nothing the worker tried while the disk was full is visible.
        assert box.snapshot() == {"data": "x" * 1024, "calls": 1}
        assert pending.status() == "queued"

        filler.unlink()  # space returns: the same runtimes carry on
        assert pending.wait(timeout=STEP) == 2
        assert box.snapshot()["calls"] == 2
        assert len(box.snapshot()["data"]) == 601 * 1024
        assert box.grow.send(kb=0).wait(timeout=STEP) == 3
        assert caller.ref(Box, "new").grow.send().wait(timeout=STEP) == 1
    finally:
        worker.close()
        caller.close()
    assert integrity(path) == [("ok",)]
    conn = sqlite3.connect(path)
    try:
        statuses = conn.execute("SELECT status, COUNT(*) FROM solid_messages GROUP BY 1").fetchall()
    finally:
        conn.close()
    assert statuses == [("completed", 4)]


def test_disk_full_after_an_effect_ran_it_runs_again_with_the_same_id(
    small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The handler ran but its completion could not be written: the effect stays
    claimed, and once the disk has space it runs again with the same ``ctx.id``
    (at least once, never lost) and is recorded done exactly once."""
    path = small_disk / "app.db"
    rt = Runtime(f"sqlite:///{path}", workers=1, effect_timeout=1.0, **FAST)
    calls: list[tuple[str, int]] = []
    fillers: list[Path] = []

    @rt.effect("send")
    def send(ctx: EffectContext, to: str) -> None:
        calls.append((ctx.id, ctx.attempt))
        if len(calls) == 1:
            fillers.append(fill(small_disk))  # the disk fills while the email goes out

    rt.install()
    caplog.set_level(logging.WARNING, logger="solid_objects")
    with rt:
        rt.ref(Box, "m").mail(to="ann@example.com")  # the turn committed: the effect exists
        wait_until(lambda: fillers, "the handler to run and fill the disk")
        wait_until(
            lambda: any(
                r.getMessage().startswith("could not record effect")
                and "disk is full" in str(r.exc_info)
                for r in caplog.records
            ),
            "recording the effect's completion to fail on the full disk",
        )
        assert rows(rt, "SELECT status FROM solid_effects") == [("running",)]
        fillers[0].unlink()
        wait_until(
            lambda: rows(rt, "SELECT status FROM solid_effects") == [("done",)],
            "the effect to run again and be recorded done",
        )
    assert len(calls) == 2 and calls[0][0] == calls[1][0], calls
    assert [attempt for _, attempt in calls] == [1, 2]
    assert integrity(path) == [("ok",)]


# --- a file-size limit on a worker process (no root needed) ---------------------------------


def raised_by(traceback: str) -> str:
    """The exception line of a logged traceback: its first line after the header that
    is not indented (log lines of a later shutdown may follow it)."""
    body = traceback.splitlines()[1:]
    return next((line for line in body if line and not line[0].isspace()), "")


def test_worker_that_cannot_grow_files_fails_its_commit_cleanly_and_recovers(
    tmp_path: Path,
) -> None:
    """A worker process under ``RLIMIT_FSIZE`` runs a turn whose commit needs more room
    than it may write: SQLite's write fails (EFBIG, a disk I/O error), the commit is
    refused as a whole and the worker survives; once the limit is lifted (SIGUSR1) the
    message commits exactly once, and the file was never corrupted."""
    from tests.apps.limited import Blob

    path = tmp_path / "app.db"
    url = f"sqlite:///{path}"
    caller = Runtime(url, workers=0, call_timeout=STEP)
    caller.install()
    blob = caller.ref(Blob, "b")
    first = blob.grow.send(kb=1)
    big = blob.grow.send(kb=2048)
    sizes = [p.stat().st_size for p in tmp_path.glob("app.db*")]
    limit = max(sizes) + 512 * 1024  # room for claims and leases, not for 2 MiB of state
    stderr_path = tmp_path / "worker.stderr"
    env = {**os.environ, "SOLID_TEST_DB": url, "SOLID_TEST_OPTIONS": json.dumps(FAST)}
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.apps.limited",
                str(limit),
                "worker",
                "tests.apps.limited:runtime",
            ],
            cwd=Path(__file__).resolve().parents[1],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
        )
    try:
        assert first.wait(timeout=STEP) == 1  # small commits fit under the limit
        wait_until(
            lambda: "disk I/O error" in stderr_path.read_text(errors="replace"),
            "the worker's commit to hit the file size limit",
        )
        assert proc.poll() is None, stderr_path.read_text(errors="replace")
        assert big.status() == "queued"
        assert blob.snapshot() == {"data": "x" * 1024, "calls": 1}
        assert integrity(path) == [("ok",)]

        os.kill(proc.pid, signal.SIGUSR1)
        assert big.wait(timeout=STEP) == 2
        assert len(blob.snapshot()["data"]) == (1 + 2048) * 1024
        assert blob.grow.send().wait(timeout=STEP) == 3
    finally:
        proc.terminate()
        proc.wait(timeout=STEP)
        caller.close()
    # After the lift nothing fails, except that the worker may still be logging the
    # failure of a commit that hit the limit just before it (seen once in CI: the
    # writer's warning came 1 ms before the lift, the worker's traceback 1 ms after).
    after_lift = stderr_path.read_text(errors="replace").split("limit lifted")[-1]
    tracebacks = after_lift.split("Traceback")[1:]
    assert len(tracebacks) <= 1, after_lift
    assert all("disk I/O error" in raised_by(t) for t in tracebacks), after_lift
    assert integrity(path) == [("ok",)]
    assert rows_of(path, "SELECT status, COUNT(*) FROM solid_messages GROUP BY 1") == [
        ("completed", 3)
    ]


def rows_of(path: Path, sql: str) -> list[Any]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()
