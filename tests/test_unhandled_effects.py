"""An effect no live process handles dies after ``unhandled_effect_timeout``.

On all three databases: an ``emit`` with a name nobody handles becomes ``dead`` with
its ``on_failure`` callback; ``None`` keeps it pending; the doctor and the metrics
list the name. Across a real process boundary: a live worker process that handles
the name (its row in the process registry lists it) prevents the death, even while
it cannot run the effect yet; once that process is killed, the effect dies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from solid_objects import Actor, Runtime, query
from solid_objects.admin import allow
from solid_objects.errors import ConfigurationError

from .conftest import db_now

ROOT = Path(__file__).resolve().parents[1]


class UnhandledMailbox(Actor):
    failures: list[dict[str, Any]] = []

    def occupy(self, gate: str) -> str:
        """Keeps the handler process's only effect thread busy while ``gate`` exists."""
        return self.emit("hold", gate=gate)

    def signup(self, to: str) -> str:
        return self.emit("send_mail", to=to, on_failure="mail_failed")

    def typo(self, to: str) -> str:
        return self.emit("send_mial", to=to, on_failure="mail_failed")

    def mail_failed(self, effect_id: str, error: dict[str, Any]) -> None:
        self.failures.append({"effect_id": effect_id, **error})

    @query
    def failed(self) -> list[dict[str, Any]]:
        return self.failures


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout:g}s waiting for {what}"
        time.sleep(0.05)


def effect_status(rt: Runtime, effect_id: str) -> str:
    with rt.store.read() as tx:
        return str(tx.scalar("SELECT status FROM solid_effects WHERE id = :i", {"i": effect_id}))


def due_for_ms(rt: Runtime, effect_id: str) -> int:
    """How long the effect has been due, on the database clock."""
    with rt.store.read() as tx:
        due = int(
            tx.scalar("SELECT available_at FROM solid_effects WHERE id = :i", {"i": effect_id})
        )
    return db_now(rt) - due


def test_an_effect_nobody_handles_dies_with_its_failure_callback(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(unhandled_effect_timeout=0.5, lease_duration=2.0)
    with rt:
        ref = rt.ref(UnhandledMailbox, "typo")
        effect_id = ref.typo(to="a@example.com")
        failures = wait_for(ref.failed, 60, "the on_failure callback")
    assert effect_status(rt, effect_id) == "dead"
    assert failures[0]["effect_id"] == effect_id
    assert failures[0]["type"] == "UnhandledEffect"
    assert "send_mial" in failures[0]["message"]
    assert "unhandled_effect_timeout" in failures[0]["message"]


def test_none_keeps_an_unhandled_effect_pending_and_doctor_and_metrics_list_it(
    make_runtime: Callable[..., Runtime],
) -> None:
    import prometheus_client  # the dev extra

    from solid_objects.observability import PrometheusMetrics, observe

    rt = make_runtime(unhandled_effect_timeout=None, lease_duration=2.0)
    registry = prometheus_client.CollectorRegistry()
    observe(rt, PrometheusMetrics(registry))
    with rt:
        ref = rt.ref(UnhandledMailbox, "patient")
        effect_id = ref.typo(to="b@example.com")
        wait_for(lambda: due_for_ms(rt, effect_id) > 1000, 60, "the effect to be due 1 s")
        assert rt.kernel.pool.effects.expire_unhandled() == 0
        assert effect_status(rt, effect_id) == "pending"
        backlog = next(c for c in rt.doctor(round_trip=False).checks if c.name == "backlog")
        assert backlog.status == "warn"
        assert "no live process handles effect send_mial (1 pending)" in backlog.detail
        assert backlog.advice is not None and "@runtime.effect" in backlog.advice
        assert registry.get_sample_value("solid_unhandled_effects", {"effect": "send_mial"}) == 1
        assert registry.get_sample_value("solid_unhandled_effects", {"effect": "hold"}) is None
    assert ref.failed() == []


@pytest.mark.parametrize("bad", [0, -5, float("nan"), "1h", True])
def test_unhandled_effect_timeout_is_validated(bad: object, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="unhandled_effect_timeout"):
        Runtime(f"sqlite:///{tmp_path}/app.db", unhandled_effect_timeout=bad)
    assert not (tmp_path / "app.db").exists()


@pytest.fixture
def handler_process(db_url: str, tmp_path: Path) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    """Starts ``tests.apps.effectapp`` as a real worker process; killed at teardown."""
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        env = dict(
            os.environ,
            SOLID_TEST_DB=db_url,
            SOLID_TEST_OPTIONS=json.dumps({"lease_duration": 2.0, "poll_interval": 0.05}),
            PYTHONUNBUFFERED="1",
        )
        with open(tmp_path / "handler.stderr", "wb") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "solid_objects", "worker", "tests.apps.effectapp:runtime"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
            )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def test_a_live_process_that_handles_the_effect_prevents_its_death(
    make_runtime: Callable[..., Runtime],
    handler_process: Callable[[], subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    rt = make_runtime(unhandled_effect_timeout=1.0, lease_duration=2.0)
    handler = handler_process()

    def handler_registered() -> bool:
        assert handler.poll() is None, (tmp_path / "handler.stderr").read_text()
        with rt.store.read() as tx:
            return "send_mail" in rt.store.processes.handled_effect_names(tx)

    wait_for(handler_registered, 60, "the handler process to register")
    rt.admin.set_policy(allow({"ops": "read"}))
    listed = rt.admin.as_principal("ops").list_processes().items
    assert [p.effect_names for p in listed] == [["hold", "send_mail"]]  # what it handles
    gate = tmp_path / "gate"
    gate.touch()
    with rt:
        ref = rt.ref(UnhandledMailbox, "handled")
        hold_id = ref.occupy(gate=str(gate))
        wait_for(lambda: _running_hold(rt), 60, "the handler process to take the hold effect")
        effect_id = ref.signup(to="c@example.com")
        # Its only effect thread is busy: send_mail waits, due for longer than the timeout.
        wait_for(
            lambda: effect_status(rt, effect_id) != "pending" or due_for_ms(rt, effect_id) > 1500,
            60,
            "send_mail to be due 1.5 s",
        )
        assert effect_status(rt, effect_id) == "pending"  # our own poller left it alone
        assert rt.kernel.pool.effects.expire_unhandled() == 0
        assert effect_status(rt, effect_id) == "pending"
        with rt.store.read() as tx:
            assert rt.store.processes.unhandled_effect_counts(tx) == {}
        # The handler process dies: nobody handles send_mail any more.
        handler.kill()
        handler.wait(timeout=30)
        failures = wait_for(ref.failed, 90, "send_mail to die once its handler is gone")
    assert effect_status(rt, effect_id) == "dead"
    assert failures[0]["effect_id"] == effect_id
    assert failures[0]["type"] == "UnhandledEffect"
    assert hold_id != effect_id


def _running_hold(rt: Runtime) -> bool:
    """The hold effect is running in the handler process (claimed by another owner)."""
    with rt.store.read() as tx:
        claimed_by = tx.scalar(
            "SELECT claimed_by FROM solid_effects WHERE name = 'hold' AND status = 'running'"
        )
    return claimed_by is not None and claimed_by != rt.kernel.pool.owner
