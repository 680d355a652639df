"""SQLite's group commit (``store/writer.py``): one body's failure never leaks into another's."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from solid_objects import Runtime
from solid_objects.store import Tx


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
