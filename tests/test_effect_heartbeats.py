"""A running effect's claim is renewed by its live process: a handler slower than
``effect_timeout`` runs once even with other workers polling, another process takes
it over (same ``ctx.id``) only when the holder dies, and ``max_duration`` fails an
attempt that runs too long. Real worker processes on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from solid_objects import Actor, EffectContext, Runtime
from solid_objects.errors import ConfigurationError, EffectTimedOut
from tests.apps.procapp import Welcome, read_journal

from .test_processes import STEP, Cluster, wait_until

pytestmark = pytest.mark.slow

#: The handler's running time and the claim's silence bound, as in the report.
HANDLER_SECONDS = 2.5
OPTIONS: dict[str, Any] = {"workers": 1, "effect_timeout": 1.0, "lease_duration": 1.0}


@pytest.fixture
def cluster(tmp_path: Path, db_url: str, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Worker processes on the test's database."""
    c = Cluster(tmp_path, db_url)
    request.addfinalizer(c.close)
    yield c


def sends(c: Cluster, event: str = "send:") -> list[dict[str, Any]]:
    return [e for e in read_journal(c.journal) if e["event"].startswith(event)]


def test_a_slow_effect_runs_once_while_its_process_lives(cluster: Cluster) -> None:
    rt = cluster.caller()
    cluster.start_workers(2, **OPTIONS)
    cluster.gate.touch()
    user = rt.ref(Welcome, "slow@example.com")
    user.send_email.send(gate=str(cluster.gate), journal=str(cluster.journal))
    wait_until(lambda: sends(cluster), STEP, "the handler to start")
    time.sleep(HANDLER_SECONDS)  # 2.5 claim timeouts: unrenewed, it would start again
    cluster.gate.unlink()
    wait_until(lambda: sends(cluster, "sent:"), STEP, "the handler to finish")
    time.sleep(2 * OPTIONS["effect_timeout"])  # a late second start would show here
    assert len(sends(cluster)) == 1, sends(cluster)
    with rt.store.read() as tx:
        assert tx.rows("SELECT status, attempts FROM solid_effects") == [("done", 1)]


def test_after_sigkill_of_its_holder_it_runs_again_once_with_the_same_id(
    cluster: Cluster,
) -> None:
    rt = cluster.caller()
    workers = cluster.start_workers(2, **OPTIONS)
    cluster.gate.touch()
    user = rt.ref(Welcome, "killed@example.com")
    user.send_email.send(gate=str(cluster.gate), journal=str(cluster.journal))
    (first,) = wait_until(lambda: sends(cluster), STEP, "the handler to start")
    holder = workers[first["pid"]]
    os.kill(holder.pid, signal.SIGKILL)
    holder.kill()
    second = wait_until(lambda: sends(cluster)[1:], STEP, "another process to take it over")
    cluster.gate.unlink()
    wait_until(lambda: sends(cluster, "sent:"), STEP, "the handler to finish")
    time.sleep(2 * OPTIONS["effect_timeout"])
    started = sends(cluster)
    assert len(started) == 2, started
    assert started[0]["event"] == second[0]["event"]  # the same ctx.id
    assert second[0]["pid"] != holder.pid
    with rt.store.read() as tx:
        assert tx.rows("SELECT status, attempts FROM solid_effects") == [("done", 2)]


class Job(Actor):
    def run(self) -> None:
        self.emit("crunch")


def test_max_duration_fails_the_attempt_and_heartbeat_says_so(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=1, effect_timeout=0.6, effect_max_attempts=1)
    seen: list[str] = []
    released = threading.Event()

    @rt.effect("crunch", max_duration=0.5)
    def crunch(ctx: EffectContext) -> None:
        deadline = time.monotonic() + 10
        try:
            while time.monotonic() < deadline:
                ctx.heartbeat()
                time.sleep(0.05)
        except EffectTimedOut as exc:
            seen.append(str(exc))
            raise
        finally:
            released.set()

    rt.start()
    rt.ref(Job, "j").run()

    def status() -> Any:
        with rt.store.read() as tx:
            return tx.row("SELECT status, error FROM solid_effects")

    row = wait_until(lambda: (s := status()) is not None and s[0] == "dead" and s, STEP, "dead")
    assert "EffectTimedOut" in row[1] and "max_duration of 0.5s" in row[1]
    assert released.wait(STEP)
    assert seen and "max_duration" in seen[0]


def test_max_duration_must_be_a_positive_number(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(workers=0)
    for bad in (0, -1, "5", True):
        with pytest.raises(ConfigurationError, match="max_duration"):
            rt.effect("x", max_duration=bad)  # type: ignore[arg-type]
    assert rt.effects.names() == ()
