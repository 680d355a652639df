"""Group commit (``store/writer.py``): one body's failure never leaks into another's.

SQLite's writer thread, and the servers' batching of one hot actor's enqueues.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from solid_objects import Runtime
from solid_objects.errors import DatabaseError
from solid_objects.store import Tx
from solid_objects.store.writer import EnqueueBatcher


def test_a_body_that_writes_then_raises_leaves_nothing_and_spares_its_batch(
    tmp_path: Path,
) -> None:
    rt = Runtime(f"sqlite:///{tmp_path / 'g.db'}", workers=0)
    rt.install()
    store = rt.store
    gate = threading.Event()

    def blocker(tx: Tx) -> None:
        assert gate.wait(10)  # holds the writer so the next bodies form one batch

    def dirty(tx: Tx) -> None:
        tx.run("INSERT INTO solid_schema (name, version) VALUES ('dirty', 1)")
        raise ValueError("broke its promise to raise before writing")

    def clean(tx: Tx) -> str:
        tx.run("INSERT INTO solid_schema (name, version) VALUES ('clean', 1)")
        return "ok"

    first = store.transact_future(blocker)
    failing = store.transact_future(dirty, isolated=False)
    passing = store.transact_future(clean, isolated=False)
    gate.set()
    first.result(10)
    with pytest.raises(ValueError, match="broke its promise"):
        failing.result(10)
    assert passing.result(10) == "ok"
    with store.read() as tx:
        names = {r[0] for r in tx.rows("SELECT name FROM solid_schema")}
    assert names == {"solid_objects", "clean"}
    rt.close()


# --- the servers' batching of one hot key (EnqueueBatcher) ---------------------------------


class _FakeCommits:
    """Stands in for ``Store.transact``: records each transaction's bodies' results."""

    def __init__(self, *, fail_commit: BaseException | None = None) -> None:
        self.transactions: list[list[Any]] = []
        self.threads: list[int] = []
        self.hold = threading.Event()
        self.holding = threading.Event()
        self.fail_commit = fail_commit

    def __call__(self, body: Any) -> Any:
        if not self.transactions and not self.hold.is_set():
            self.holding.set()
            assert self.hold.wait(10)
        result = body(None)
        if self.fail_commit is not None:
            raise self.fail_commit
        self.transactions.append(result if isinstance(result, list) else [result])
        self.threads.append(threading.get_ident())
        return result


def _queue_behind_first(
    batcher: EnqueueBatcher, commits: _FakeCommits, bodies: dict[str, Any]
) -> dict[str, Any]:
    """Submit the first body; once its transaction is in flight, submit the others one
    by one (each queued before the next), then let the transactions run. The futures."""
    futures: dict[str, Any] = {}

    def submit(name: str) -> None:
        futures[name] = batcher.submit("hot", bodies[name])

    names = list(bodies)
    threads = [threading.Thread(target=submit, args=(names[0],))]
    threads[0].start()
    assert commits.holding.wait(10)  # the first transaction is in flight
    for n, name in enumerate(names[1:], start=1):  # these queue behind it, in order
        threads.append(threading.Thread(target=submit, args=(name,)))
        threads[-1].start()
        deadline = time.monotonic() + 10
        while len(batcher._waiting) < n and time.monotonic() < deadline:
            time.sleep(0.001)
    commits.hold.set()
    for t in threads:
        t.join(10)
    return futures


def test_callers_of_one_hot_key_share_the_next_transaction_in_arrival_order() -> None:
    commits = _FakeCommits()
    batcher = EnqueueBatcher(commits, patience=60.0)
    futures = _queue_behind_first(batcher, commits, {str(i): (lambda tx, i=i: i) for i in range(6)})
    assert commits.transactions == [[0], [1, 2, 3, 4, 5]]
    assert [futures[str(i)].result() for i in range(6)] == list(range(6))
    assert commits.threads[0] != commits.threads[1]  # no thread ran two batches
    assert batcher._waiting == [] and not batcher._busy


def test_a_failing_body_fails_alone_and_an_unknown_commit_fails_everyone() -> None:
    def ok(tx: Any) -> str:
        return "ok"

    def bad(tx: Any) -> str:
        raise ValueError("bad input")

    commits = _FakeCommits()
    batcher = EnqueueBatcher(commits, patience=60.0)
    results = _queue_behind_first(batcher, commits, {"first": ok, "a": ok, "b": bad, "c": ok})
    assert results["a"].result() == "ok" and results["c"].result() == "ok"
    with pytest.raises(ValueError):
        results["b"].result()
    # the batch failed as a whole, then each ran alone
    assert commits.transactions == [["ok"], ["ok"], ["ok"]]

    unknown = DatabaseError("COMMIT failed", None, commit_unknown=True)
    batcher = EnqueueBatcher(_FakeCommits(fail_commit=unknown), patience=60.0)
    batcher._commit.hold.set()  # type: ignore[attr-defined]
    with pytest.raises(DatabaseError):
        batcher.submit("hot", ok).result()
