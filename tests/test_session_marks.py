"""Session marks: the database says when a process's session is gone, never early."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from solid_objects.store.sessions import (
    SessionMark,
    mark_name,
    marks_free,
    pid_gone,
    start_ticks,
)

from .conftest import BACKENDS

#: SQLite has no server sessions: :func:`pid_gone` covers it, tested below.
servers = pytest.mark.parametrize("backend", [b for b in BACKENDS if b != "sqlite"])

_HOLDER = """
import sys, time
from sqlalchemy import create_engine
from solid_objects.store.sessions import SessionMark
m = SessionMark(create_engine(sys.argv[1]), sys.argv[2], sys.argv[3])
assert m.hold()
print("held", flush=True)
time.sleep(600)
"""


def _family(backend: str) -> str:
    return {"postgres": "postgresql", "postgresql": "postgresql"}.get(backend, "mysql")


def _free(url: str, family: str, name: str) -> bool:
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return marks_free(conn, family, [name]) == [name]
    finally:
        engine.dispose()


def _wait_free(url: str, family: str, name: str, bound: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < bound:
        if _free(url, family, name):
            return time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError(f"mark {name} still held after {bound} s")


@servers
def test_mark_is_freed_when_its_process_is_killed_but_not_when_stopped(
    backend: str, db_url: str
) -> None:
    family = _family(backend)
    name = mark_name("t_", f"owner-{os.getpid()}-{backend}")
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, db_url, family, name], stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        assert not _free(db_url, family, name)
        # stalled but alive: its session stays open, so its mark stays held
        holder.send_signal(signal.SIGSTOP)
        time.sleep(1.5)
        assert not _free(db_url, family, name)
        holder.kill()  # SIGKILL: the OS closes its socket, the server frees the lock
        assert _wait_free(db_url, family, name, bound=10.0) < 10.0
    finally:
        holder.kill()
        holder.wait()


@servers
def test_mark_is_freed_when_its_connection_is_killed(backend: str, db_url: str) -> None:
    family = _family(backend)
    name = mark_name("t_", f"conn-{os.getpid()}")
    engine = create_engine(db_url)
    mark = SessionMark(engine, family, name)
    try:
        assert mark.hold()
        assert not _free(db_url, family, name)
        session = mark.session_id()
        assert session is not None
        kill = "SELECT pg_terminate_backend(:id)" if family == "postgresql" else "KILL :id"
        other = create_engine(db_url, poolclass=NullPool)
        with other.connect() as conn:
            conn.execute(text(kill), {"id": session})
        other.dispose()
        _wait_free(db_url, family, name, bound=5.0)
    finally:
        mark.release()
        engine.dispose()


@servers
def test_second_holder_cannot_take_a_held_mark(backend: str, db_url: str) -> None:
    family = _family(backend)
    name = mark_name("t_", "dup")
    engine = create_engine(db_url)
    first, second = SessionMark(engine, family, name), SessionMark(engine, family, name)
    try:
        assert first.hold()
        assert not second.hold()
        first.release()
        _wait_free(db_url, family, name, bound=5.0)
        assert second.hold()
    finally:
        first.release()
        second.release()
        engine.dispose()


def test_pid_gone_sees_a_killed_process_not_a_stopped_one() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    started = start_ticks(child.pid)
    assert started is not None and started > 0
    try:
        assert not pid_gone(child.pid, started)
        child.send_signal(signal.SIGSTOP)
        assert not pid_gone(child.pid, started)
        child.kill()
        deadline = time.monotonic() + 5
        while not pid_gone(child.pid, started) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pid_gone(child.pid, started)  # a zombie (not yet reaped) counts as gone
        child.wait()
        assert pid_gone(child.pid, started)
    finally:
        child.kill()
        child.wait()


def test_pid_gone_sees_a_reused_pid_by_its_start_not_by_a_clock() -> None:
    """A live pid that started at other ticks than recorded is another process."""
    mine = start_ticks(os.getpid())
    assert mine is not None
    assert not pid_gone(os.getpid(), mine)
    assert pid_gone(os.getpid(), mine + 1)
