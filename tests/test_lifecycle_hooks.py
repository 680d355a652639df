"""Lifecycle hooks: ``on_activate`` after state is loaded, before an
activation's first turn, a failure being a setup failure with the attempt budget and
dead letter; ``on_deactivate`` best effort on idle release and shutdown. On every
database."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest

from solid_objects import Actor, MessageFailed, NotInTurn, Runtime
from solid_objects.engine import worker as worker_module
from solid_objects.errors import InvalidActorDefinition

from .conftest import count_rows

_events: list[str] = []
_activate_failures: dict[str, int] = {}
_deactivated = threading.Event()
_deactivate_raises: set[str] = set()


@pytest.fixture(autouse=True)
def _reset() -> None:
    _events.clear()
    _activate_failures.clear()
    _deactivated.clear()
    _deactivate_raises.clear()


class Hooked(Actor):
    value: int = 0
    activations: int = 0
    seen_at_activation: list[int] = []

    def on_activate(self) -> None:
        if _activate_failures.get(self.actor_id, 0) > 0:
            _activate_failures[self.actor_id] -= 1
            _events.append("activate-failed")
            raise ConnectionError("cache unreachable")
        _events.append(f"activate:{self.value}")
        self.activations += 1
        self.seen_at_activation.append(self.value)
        with pytest.raises(NotInTurn):
            self.current_message  # noqa: B018

    def on_deactivate(self) -> None:
        _events.append(f"deactivate:{self.value}")
        _deactivated.set()
        if self.actor_id in _deactivate_raises:
            raise RuntimeError("flush failed")

    def add(self, n: int = 1) -> int:
        _events.append(f"turn:{self.activations}")
        self.value += n
        return self.value


def test_on_activate_runs_once_before_the_first_turn_and_commits_with_it(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    ref = rt.ref(Hooked, "a")
    ref.add.send(n=2)
    ref.add.send(n=3)
    rt.testing.drain()
    assert _events == ["activate:0", "turn:1", "turn:1", "deactivate:5"]  # drain releases
    assert ref.snapshot()["activations"] == 1
    assert "on_activate" not in {op for op in rt.ref(Hooked, "a")._definition.operations}


def test_a_new_activation_runs_on_activate_on_the_loaded_state(
    make_runtime: Callable[..., Runtime],
) -> None:
    first = make_runtime(workers=1)
    with first:
        assert first.ref(Hooked, "a").add(n=5) == 5
    second = make_runtime(workers=1)
    with second:
        assert second.ref(Hooked, "a").add(n=1) == 6
        assert second.ref(Hooked, "a").add(n=1) == 7  # warm: a direct turn, no new activation
    snapshot = second.ref(Hooked, "a").snapshot()
    assert snapshot["seen_at_activation"] == [0, 5]
    assert snapshot["activations"] == 2


def test_a_failing_on_activate_retries_then_dead_letters_the_head_message(
    make_runtime: Callable[..., Runtime],
) -> None:
    _activate_failures["f"] = 100
    with make_runtime(workers=1, max_attempts=3, retry_base_delay=0.01) as rt:
        ref = rt.ref(Hooked, "f")
        head = ref.add.send(n=1)
        with pytest.raises(MessageFailed) as info:
            head.wait(timeout=30)
        assert info.value.error["type"] == "ConnectionError"
        assert _events.count("activate-failed") == 3
        _activate_failures["f"] = 0
        assert ref.add(n=10) == 10  # the mailbox moves on; on_activate ran this time
    assert head.status() == "dead"
    assert count_rows(rt, "messages", "status = 'dead' AND attempts = 3") == 1
    assert rt.ref(Hooked, "f").snapshot()["activations"] == 1


def test_on_deactivate_runs_on_idle_release(make_runtime: Callable[..., Runtime]) -> None:
    with make_runtime(workers=1, idle_timeout=0.2) as rt:
        assert rt.ref(Hooked, "i").add(n=4) == 4
        assert _deactivated.wait(timeout=30)
        assert _events == ["activate:0", "turn:1", "deactivate:4"]  # run before the release


def test_on_deactivate_runs_at_shutdown_and_its_failure_is_only_logged(
    make_runtime: Callable[..., Runtime], caplog: pytest.LogCaptureFixture
) -> None:
    _deactivate_raises.add("s")
    rt = make_runtime(workers=1)
    with caplog.at_level(logging.WARNING, logger="solid_objects.lifecycle"), rt:
        assert rt.ref(Hooked, "s").add(n=1) == 1
    assert _events[-1] == "deactivate:1"
    assert any("flush failed" in r.getMessage() for r in caplog.records)
    assert count_rows(rt, "actors", "lease_owner IS NOT NULL") == 0


_release_slow = threading.Event()


class HookedSlowly(Actor):
    value: int = 0

    def on_deactivate(self) -> None:
        _events.append(f"deactivate:{self.value}")

    def slow(self) -> int:
        _events.append("slow")
        _release_slow.wait(30)
        self.value += 1
        return self.value

    def add(self) -> int:
        self.value += 1
        return self.value


def test_on_deactivate_runs_at_shutdown_for_an_actor_with_work_still_queued(
    make_runtime: Callable[..., Runtime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message that arrives during the last turn requeues the activation; stopping
    leaves that work for later (it is not chained into the turn's commit, however
    soon the turn ends), but the activation still ends with its hook."""
    # Without a time budget a chain would always take the queued message along.
    monkeypatch.setattr(worker_module, "_BATCH_BUDGET", 60.0)
    _release_slow.clear()
    rt = make_runtime(workers=1)
    rt.start()
    ref = rt.ref(HookedSlowly, "q")
    first = ref.slow.send()
    deadline = time.monotonic() + 30
    while "slow" not in _events:
        assert time.monotonic() < deadline, "the slow turn never started"
        time.sleep(0.01)
    ref.add.send()  # signals the running activation: requeued when its turn ends
    stopper = threading.Thread(target=rt.stop)
    stopper.start()
    while not rt.kernel.pool.stopping:
        assert time.monotonic() < deadline, "stop() never began"
        time.sleep(0.01)
    _release_slow.set()
    stopper.join(30)
    assert first.result() == 1
    assert _events[-1] == "deactivate:1"


def test_a_hook_that_needs_arguments_is_refused_at_definition() -> None:
    with pytest.raises(InvalidActorDefinition, match="on_activate"):

        class Bad(Actor, auto_register=False):
            def on_activate(self, reason: str) -> None: ...
