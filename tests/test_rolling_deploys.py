"""Rolling deploys: old and new worker processes at once lose, double and kill nothing.

Real worker processes on SQLite, PostgreSQL and MariaDB run two versions of one
``Cart`` (``tests/apps/deploy_v1.py`` and ``deploy_v2.py``): the second adds an
operation, ``checkout``, and migrates the state to version 2. An old worker that
claims a message for ``checkout``, or an actor whose state the new code already
migrated, leaves it for a new worker instead of failing it (no attempt counted),
and writes no state back at version 1. With no capable process at all, such a
message waits ``incapable_timeout`` and then dies with an error naming what was
missing.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import pytest
from starlette.testclient import TestClient

from solid_objects import CallTimeout, MessageFailed, MessageReference, Runtime
from solid_objects.admin import allow
from solid_objects.web import dashboard
from tests.apps import deploy_v1, deploy_v2
from tests.conftest import count_rows
from tests.test_processes import STEP, Cluster, cluster, wait_until

pytestmark = pytest.mark.slow

__all__ = ["cluster"]

V1 = "tests.apps.deploy_v1:runtime"
V2 = "tests.apps.deploy_v2:runtime"


def callers(cluster: Cluster) -> tuple[Runtime, Runtime]:
    """A caller-only runtime of each version (each registers its own ``Cart``)."""
    return cluster.caller(actors=[deploy_v1.Cart]), cluster.caller(actors=[deploy_v2.Cart])


def stop(worker: Any) -> None:
    """SIGTERM: the worker drains, releases its leases and exits 0."""
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(timeout=60) == 0, worker.stderr()


def test_a_rolling_deploy_under_load_kills_loses_and_doubles_nothing(cluster: Cluster) -> None:
    old, new = callers(cluster)
    old_workers = cluster.start_workers(2, V1)
    carts = [f"cart-{i}" for i in range(12)]
    sent: dict[str, list[str]] = {c: [] for c in carts}
    refs: list[MessageReference[Any]] = []
    checkouts: dict[str, int] = dict.fromkeys(carts, 0)
    lock = threading.Lock()
    stop_traffic = threading.Event()

    def traffic(runtime: Runtime, cls: type[Any], tag: str) -> None:
        n = 0
        while not stop_traffic.is_set():
            cart = carts[n % len(carts)]
            sku = f"{tag}-{n}"
            with lock:  # per cart, the order sent is the order of the mailbox
                refs.append(runtime.ref(cls, cart).add.send(sku=sku))
                sent[cart].append(sku)
            n += 1
            time.sleep(0.005)

    threads = [threading.Thread(target=traffic, args=(old, deploy_v1.Cart, "old"))]
    threads[0].start()
    try:
        time.sleep(1.0)  # the old workers alone
        cluster.start_workers(1, V2)  # the deploy begins: new code beside the old
        threads.append(threading.Thread(target=traffic, args=(new, deploy_v2.Cart, "new")))
        threads[1].start()
        for _ in range(3):  # the new operation, to every cart, while old workers run
            for cart in carts:
                with lock:
                    refs.append(new.ref(deploy_v2.Cart, cart).checkout.send())
                    checkouts[cart] += 1
            time.sleep(0.5)
        for worker in old_workers.values():  # the deploy ends: old workers stop
            stop(worker)
        time.sleep(0.5)
    finally:
        stop_traffic.set()
        for t in threads:
            t.join(STEP)
    for ref in refs:
        ref.wait(timeout=STEP * 3)
    assert count_rows(new, "messages", "status = 'dead'") == 0
    assert count_rows(new, "messages", "status <> 'completed'") == 0
    for cart in carts:
        state = new.ref(deploy_v2.Cart, cart).snapshot()
        assert state["items"] == sent[cart]  # each add once, in order
        assert state["checkouts"] == checkouts[cart]  # no state written back at version 1
    assert count_rows(new, "actors", "state_version <> 2") == 0
    left = sum(w.stderr().count("cannot run") for w in old_workers.values())
    assert left > 0, "the old workers never met work they could not run: nothing was tested"


def test_an_old_worker_leaves_a_new_operation_for_a_new_worker(cluster: Cluster) -> None:
    old, new = callers(cluster)
    (old_worker,) = cluster.start_workers(1, V1).values()
    checkout = new.ref(deploy_v2.Cart, "c").checkout.send()
    wait_until(lambda: "cannot run Cart.checkout" in old_worker.stderr(), STEP, "the leave")
    time.sleep(1.0)  # it keeps leaving it: not run, not failed, no attempt used
    assert checkout.status() == "queued"
    assert count_rows(new, "messages", "attempts > 0") == 0
    assert count_rows(new, "actors", "attempt > 0 OR lease_owner IS NOT NULL") == 0
    assert "waiting for a process that runs Cart.checkout" in old_worker.stderr()
    # What a caller, doctor and the operator see meanwhile.
    with pytest.raises(CallTimeout) as timed_out:
        new.ref(deploy_v2.Cart, "d").with_options(timeout=1.0).checkout()
    assert "waiting for a process that runs Cart.checkout" in str(timed_out.value)
    (backlog,) = [c for c in new.doctor(round_trip=False).checks if c.name == "backlog"]
    assert backlog.status == "warn"
    assert "waiting for a process that runs Cart.checkout (2 waiting)" in backlog.detail
    new.admin.set_policy(allow({"ops:*": "*"}))
    assert new.admin.as_principal("ops:a").inspect_actor("Cart", "c").waiting_for == (
        "Cart.checkout"
    )
    with TestClient(dashboard(new, principal=lambda request: "ops:a")) as browser:
        page = browser.get("/actors/Cart/c").text
    assert "waiting for a process that runs Cart.checkout" in page
    cluster.start_workers(1, V2)
    assert checkout.wait(timeout=STEP) == 1
    # An add sent by old code runs too: by the new worker, since the old one leaves
    # the state the new one migrated to version 2.
    assert old.ref(deploy_v1.Cart, "c").add(sku="x") == 1
    assert new.ref(deploy_v2.Cart, "c").snapshot() == {"items": ["x"], "checkouts": 1}
    assert count_rows(new, "actors", "actor_id = 'c' AND state_version = 2") == 1
    assert count_rows(new, "messages", "status = 'dead'") == 0


def test_with_no_capable_process_the_message_dies_after_incapable_timeout(
    cluster: Cluster,
) -> None:
    _, new = callers(cluster)
    (old_worker,) = cluster.start_workers(1, V1, incapable_timeout=1.0).values()
    checkout = new.ref(deploy_v2.Cart, "c").checkout.send()
    with pytest.raises(MessageFailed) as info:
        checkout.wait(timeout=STEP)
    error = info.value.error
    assert error["type"] == "UnknownOperation"
    assert "no live process runs Cart.checkout" in error["message"]
    assert "cannot run Cart.checkout" in old_worker.stderr()  # it was left first


def test_an_old_worker_leaves_state_the_new_code_migrated(cluster: Cluster) -> None:
    """No downgrade: old code never runs (nor writes) an actor whose state is at a
    version it does not know; the add waits for new code and runs once there."""
    old, new = callers(cluster)
    (new_worker,) = cluster.start_workers(1, V2).values()
    assert new.ref(deploy_v2.Cart, "m").checkout() == 1  # state version 2 now
    stop(new_worker)
    (old_worker,) = cluster.start_workers(1, V1).values()
    added = old.ref(deploy_v1.Cart, "m").add.send(sku="a")
    wait_until(
        lambda: "cannot run state version 2 of Cart" in old_worker.stderr(), STEP, "the leave"
    )
    time.sleep(1.0)
    assert added.status() == "queued"
    assert count_rows(new, "messages", "attempts > 0 AND status = 'queued'") == 0
    assert count_rows(new, "actors", "state_version = 2") == 1
    cluster.start_workers(1, V2)
    assert added.wait(timeout=STEP) == 1
    assert new.ref(deploy_v2.Cart, "m").snapshot() == {"items": ["a"], "checkouts": 1}
