"""What a stopping worker shows: a real ``solid-objects worker`` process gets
SIGTERM while a long turn runs; the registry says ``draining`` (admin API, CLI,
dashboard and doctor read it) until the turn finished and the leases were
released, then the process is stopped; its log says each step at INFO."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from solid_objects.admin import allow
from solid_objects.doctor import examine
from solid_objects.web import dashboard
from tests.apps.procapp import AppendLog

from .test_processes import STEP, Cluster, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path, db_url: str, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(tmp_path, db_url)
    request.addfinalizer(c.close)
    yield c


def test_sigterm_during_a_long_turn_shows_draining_then_stopped_and_logs_each_step(
    cluster: Cluster,
) -> None:
    rt = cluster.caller()
    rt.admin.set_policy(allow({"ops:*": "*"}))
    ops = rt.admin.as_principal("ops:alice")
    (worker,) = cluster.start_workers(1, workers=1).values()
    cluster.gate.touch()
    message = rt.ref(AppendLog, "long").append.send(
        item=1, gate=str(cluster.gate), journal=str(cluster.journal)
    )
    cluster.first_start("long", 1)
    (before,) = ops.list_processes().items
    assert before.state == "live"

    worker.proc.send_signal(signal.SIGTERM)

    def draining() -> bool:
        return [p.state for p in ops.list_processes().items] == ["draining"]

    wait_until(draining, STEP, "the registry to say draining")
    with TestClient(dashboard(rt, principal=lambda request: "ops:alice")) as page:
        shown = page.get("/processes")
    assert shown.status_code == 200
    assert re.search(r"<td[^>]*>draining</td>", shown.text), shown.text
    workers_check = next(c for c in examine(rt).checks if c.name == "workers")
    assert "1 draining" in workers_check.detail, workers_check.detail
    assert worker.alive()  # still finishing its turn
    cluster.gate.unlink()
    assert message.wait(timeout=STEP) == {"length": 1, "pid": worker.pid}
    assert worker.proc.wait(timeout=STEP) == 0
    assert ops.list_processes().items == []
    (gone,) = [
        p for p in ops.list_processes(include_stopped=True).items if p.owner == before.owner
    ]
    assert gone.state == "stopped" and gone.stop_reason == "drained"
    log = worker.stderr()
    steps = [
        "INFO solid_objects.shutdown: draining",
        "INFO solid_objects.shutdown: turns finished",
        "INFO solid_objects.shutdown: leases released: ",
        "INFO solid_objects.shutdown: worker ",
    ]
    at = [log.find(step) for step in steps]
    assert all(i >= 0 for i in at) and at == sorted(at), log[-3000:]
    assert "1 in-flight turn(s)" in log
