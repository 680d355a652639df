"""``max_activation_seconds`` bounds one activation's pass on a worker.

A busy actor gives its worker up after that long, not only after
``max_turns_per_activation`` turns, so an actor whose work arrives while two busy
ones hold the only worker gets its turn before their long mailboxes drain. The
test observes the order of turns, never their durations.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from solid_objects import Actor, Runtime, query
from solid_objects.errors import ConfigurationError

_journal: list[str] = []
_journal_lock = threading.Lock()
_busy_running = threading.Event()

#: Turns queued for each busy actor: fewer than ``max_turns_per_activation`` (64), so
#: without the time bound each one would drain in a single pass.
_QUEUED = 60


class FairShareWorkload(Actor):
    turns: int = 0

    def work(self, pause: float) -> int:
        _busy_running.set()
        time.sleep(pause)  # a slow turn: its duration is what the bound counts
        with _journal_lock:
            _journal.append(self.actor_id)
        self.turns += 1
        return self.turns

    @query
    def done(self) -> int:
        return self.turns


def test_a_busy_actor_yields_its_worker_after_max_activation_seconds(
    make_runtime: Callable[..., Runtime],
) -> None:
    _journal.clear()
    _busy_running.clear()
    caller = make_runtime(workers=0)
    busy = [caller.ref(FairShareWorkload, f"busy-{n}") for n in range(2)]
    for ref in busy:
        for _ in range(_QUEUED):
            ref.work.send(pause=0.02)
    with make_runtime(workers=1, max_activation_seconds=0.05):
        assert _busy_running.wait(60), "the busy actors never started"
        late = caller.ref(FairShareWorkload, "late").work.send(pause=0.0)
        assert late.wait(timeout=60) == 1
        for ref in busy:
            deadline = time.monotonic() + 120
            while ref.done() < _QUEUED:
                assert time.monotonic() < deadline, "the busy actors did not finish"
                time.sleep(0.05)
    with _journal_lock:
        order = list(_journal)
    assert order.count("late") == 1
    last_busy = {r.actor_id: max(i for i, a in enumerate(order) if a == r.actor_id) for r in busy}
    # The late actor ran while both busy mailboxes still had work.
    assert all(order.index("late") < last for last in last_busy.values()), (order, last_busy)


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, "1", True])
def test_max_activation_seconds_is_validated(bad: object, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="max_activation_seconds"):
        Runtime(f"sqlite:///{tmp_path}/app.db", max_activation_seconds=bad)
    assert not (tmp_path / "app.db").exists()


def test_max_activation_seconds_none_keeps_only_the_turn_bound() -> None:
    from solid_objects.options import Options

    assert Options.from_kwargs({"max_activation_seconds": None}).max_activation_seconds is None
    assert Options().max_activation_seconds == 1.0
