"""Requests across real worker processes: a SIGKILL between the request's commit and
its answer's loses no answer and delivers none twice."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.apps.procapp import AppendLog, Asker
from tests.test_processes import STEP, Cluster, cluster, wait_until

pytestmark = pytest.mark.slow

__all__ = ["cluster"]


def test_a_worker_killed_while_answering_a_request_answers_it_once(cluster: Cluster) -> None:
    rt = cluster.caller()
    workers = cluster.start_workers(2, workers=1)
    cluster.gate.touch()
    gate, journal = str(cluster.gate), str(cluster.journal)
    asked = rt.ref(Asker, "k").ask.send(gate=gate, journal=journal)
    request_id = asked.wait(timeout=STEP)  # the request committed with the asker
    started = cluster.first_start("k", 0)  # the target's turn is held in one worker
    victim = workers[started["pid"]]
    (survivor,) = (w for w in workers.values() if w is not victim)
    os.kill(victim.pid, signal.SIGKILL)
    assert victim.proc.wait(timeout=10) == -signal.SIGKILL
    cluster.gate.unlink()
    replies = wait_until(
        lambda: rt.ref(Asker, "k").snapshot()["replies"], 60, "the answer to reach the asker"
    )
    time.sleep(1.0)  # room for a second outcome, if one were coming
    replies = rt.ref(Asker, "k").snapshot()["replies"]
    assert replies == [
        {"id": request_id, "status": "completed", "length": 1, "pid": survivor.pid}
    ]
    assert rt.ref(AppendLog, "k").snapshot() == {"items": [0]}
