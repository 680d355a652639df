"""A 3-node MariaDB Galera cluster with writers on every node.

Not part of the ordinary suite: it needs the cluster of ``scripts/galera`` and is
collected only when ``SOLID_TEST_GALERA_URLS`` names its three nodes::

    scripts/galera start
    SOLID_TEST_GALERA_URLS=$(scripts/galera urls | paste -sd,) \\
        python -m pytest -q -s tests/test_galera.py
    scripts/galera stop

- six runtimes, two per node, install at once: all succeed (the install lock is a
  node's own, so the losers of the race run again);
- one runtime per node, 200 calls to one hot identity from 12 threads: 0 failed
  (Galera's certification failures, error 1213 at COMMIT, are run again), each
  applied once at the position it returned, each thread's calls in order;
- node 3 SIGKILLed under that load (calls and sends) and started again (it rejoins
  by IST): no acknowledged call or enqueued message lost or applied twice, order
  kept, the rejoined node serves the same state, and calls through it succeed again.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from solid_objects import Runtime
from solid_objects.pytest_plugin import fresh_database

from .conftest import FAST
from .test_conflict_retries import (
    RetryLog,
    SerialLedger,
    check_exactly_once,
    hot_identity_run,
    retries,  # noqa: F401  (a fixture)
)

NODES = [u for u in os.environ.get("SOLID_TEST_GALERA_URLS", "").split(",") if u]
if len(NODES) != 3:  # tests/conftest.py does not collect this module without the variable
    raise pytest.UsageError("SOLID_TEST_GALERA_URLS must name the 3 nodes of scripts/galera")

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "galera"
OPTIONS = {**FAST, "workers": 2, "call_timeout": 120.0, "lease_duration": 3.0}


@pytest.fixture
def node_urls(tmp_path: Path) -> Iterator[list[str]]:
    """A fresh database on the cluster (created on node 1, replicated), one URL per node."""
    with fresh_database(NODES[0], tmp_path) as url:
        name = make_url(url).database
        yield [make_url(n).set(database=name).render_as_string(hide_password=False) for n in NODES]


def galera(*args: str) -> None:
    subprocess.run([str(SCRIPT), *args], check=True, timeout=300)


@pytest.mark.timeout(300)
def test_installs_through_every_node_at_once_all_succeed(node_urls: list[str]) -> None:
    """``GET_LOCK`` serializes installs on one node only: through three nodes at once they
    race (a table created twice, the version row inserted twice), and the losers run
    again until they find the winner's work."""
    runtimes = [Runtime(url, **OPTIONS) for url in node_urls * 2]
    start = threading.Barrier(len(runtimes))
    failures: list[BaseException] = []

    def install(rt: Runtime) -> None:
        start.wait()
        try:
            rt.install()
        except BaseException as exc:
            failures.append(exc)

    try:
        threads = [threading.Thread(target=install, args=(rt,)) for rt in runtimes]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=240)
        assert failures == []
        with runtimes[0]:  # and the schema works
            assert runtimes[0].ref(SerialLedger, "installed").add(1) == 1
    finally:
        for rt in runtimes:
            rt.close()


@pytest.mark.timeout(900)
def test_writers_on_every_node_lose_no_call_on_one_hot_identity(
    node_urls: list[str],
    retries: RetryLog,  # noqa: F811  (the fixture imported above)
) -> None:
    runtimes: list[Runtime] = []
    try:
        for i, url in enumerate(node_urls):
            rt = Runtime(url, **OPTIONS)
            if i == 0:
                rt.install()  # once, on one node: GET_LOCK is local to a node
            rt.start()
            runtimes.append(rt)
        returned, errors, sent = hot_identity_run(runtimes, 200, 4)
        assert errors == [], f"{len(errors)} of 200 calls failed: {errors[:3]!r}"
        check_exactly_once(runtimes[0], returned, sent, 200)
        for rt in runtimes:  # every node serves the same state
            assert len(rt.ref(SerialLedger, "hot").snapshot()["items"]) == 200
        print(f"galera: 200 calls over 3 writer nodes, 0 failed, {retries.count} re-run")
    finally:
        for rt in reversed(runtimes):
            rt.close()


@pytest.mark.timeout(900)
def test_a_node_killed_and_rejoined_under_load_loses_no_acknowledged_call(
    node_urls: list[str],
) -> None:
    runtimes: list[Runtime] = []
    stop = threading.Event()
    lock = threading.Lock()
    returned: dict[int, int] = {}
    raised: dict[int, str] = {}
    sent: dict[int, list[int]] = {t: [] for t in range(12)}
    accepted: dict[int, Any] = {}  # sends that returned: their messages were enqueued
    rejoined = threading.Event()
    through_rejoined: list[int] = []  # calls through node 3 that returned after it rejoined
    try:
        for i, url in enumerate(node_urls):
            rt = Runtime(url, **OPTIONS)
            if i == 0:
                rt.install()
            rt.start()
            runtimes.append(rt)

        def caller(t: int) -> None:
            ledger = runtimes[t % 3].ref(SerialLedger, "hot").with_options(timeout=60)
            k = 0
            while not stop.is_set():
                item = t * 100_000 + k
                k += 1
                sent[t].append(item)
                try:
                    if t >= 9:  # a sender: the message is durable once send() returns
                        message = ledger.add.send(item)
                        with lock:
                            accepted[item] = message
                        time.sleep(0.05)
                        continue
                    position = ledger.add(item)
                except Exception as exc:
                    with lock:
                        raised[item] = type(exc).__name__
                    time.sleep(0.2)  # node 3 is down: do not spin
                    continue
                with lock:
                    returned[item] = position
                    if t % 3 == 2 and rejoined.is_set():
                        through_rejoined.append(item)

        def acknowledged() -> int:
            with lock:
                return len(returned)

        def until(count: int, what: str) -> None:
            deadline = time.monotonic() + 300
            while acknowledged() < count:
                assert time.monotonic() < deadline, f"no progress: {what}"
                time.sleep(0.1)

        threads = [threading.Thread(target=caller, args=(t,)) for t in range(12)]
        for th in threads:
            th.start()
        until(60, "before the kill")
        galera("kill", "3")
        killed_at = acknowledged()
        until(killed_at + 60, "while node 3 was down")
        galera("start-node", "3")
        rejoined.set()
        rejoined_at = acknowledged()
        until(rejoined_at + 60, "after node 3 rejoined")
        deadline = time.monotonic() + 120
        while len(through_rejoined) < 5:  # its runtime's pool reconnects by itself
            assert time.monotonic() < deadline, "no call through the rejoined node returned"
            time.sleep(0.1)
        stop.set()
        for th in threads:
            th.join(timeout=120)
        assert not any(th.is_alive() for th in threads)

        for item, message in accepted.items():  # every enqueued message runs
            returned[item] = message.wait(timeout=120)
        items: list[int] = runtimes[0].ref(SerialLedger, "hot").snapshot()["items"]
        assert len(items) == len(set(items)), "an operation was applied twice"
        position = {item: i + 1 for i, item in enumerate(items)}
        for item, length in returned.items():
            assert position.get(item) == length, f"acknowledged item {item} lost or moved"
        for item in items:
            assert item in returned or item in raised, "applied but never sent"
        for order in sent.values():
            mine = set(order)
            assert [i for i in items if i in mine] == [i for i in order if i in position]
        # The rejoined node serves the same state, and takes calls again.
        assert runtimes[2].ref(SerialLedger, "hot").snapshot()["items"] == items
        print(
            f"galera kill/rejoin: {len(returned)} calls and sends acknowledged "
            f"({len(accepted)} sends; {killed_at} calls before "
            f"the kill, {rejoined_at - killed_at} while node 3 was down), {len(raised)} raised "
            f"({sorted(set(raised.values()))}), {len(set(raised) & set(position))} of those "
            "committed; 0 acknowledged lost, 0 applied twice"
        )
    finally:
        stop.set()
        subprocess.run([str(SCRIPT), "start-node", "3"], timeout=300, check=False)
        for rt in reversed(runtimes):
            rt.close()
