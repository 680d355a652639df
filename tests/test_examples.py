"""The examples run as written, and the seat example keeps its promise."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from examples.seats import HOLD_FOR, Show
from examples.transfer import run_scenarios
from solid_objects import Rejected, Runtime

from .conftest import count_rows, db_now

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "command",
    [
        ["examples.onboarding"],
        ["examples.seats"],
        ["examples.transfer"],
        ["solid_objects", "quickstart"],
    ],
    ids=["onboarding", "seats", "transfer", "quickstart"],
)
def test_example_runs_and_leaves_no_temporary_files(command: list[str], tmp_path: Path) -> None:
    """Each demo runs as written and removes its temporary folder: the
    temporary directory it is given is empty afterwards."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", *command],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(temporary), "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in temporary.iterdir()) == []


def test_only_one_buyer_gets_the_last_seat_and_holds_expire(
    make_runtime: Callable[..., Runtime],
) -> None:
    with make_runtime(workers=4) as rt:
        show = rt.ref(Show, "s")

        def hold(buyer: str) -> bool:
            try:
                show.hold(seat="1", buyer=buyer)
                return True
            except Rejected:
                return False

        with ThreadPoolExecutor(8) as pool:
            assert sum(pool.map(hold, [f"b{i}" for i in range(8)])) == 1
        holder = show.snapshot()["seats"]["1"].split(":")[1]
        show.hold(seat="2", buyer="late")
        show.buy(seat="1", buyer=holder)
        with pytest.raises(Rejected):
            show.buy(seat="3", buyer=holder)
    assert count_rows(rt, "reminders") == 1  # seat 1's expiry was cancelled by the sale
    later = datetime.fromtimestamp(db_now(rt) / 1000, UTC) + HOLD_FOR + timedelta(seconds=1)
    rt.testing.run_due_reminders(later)
    assert show.snapshot()["seats"] == {"1": f"sold:{holder}"}
    assert show.free() == ["2", "3"]


def test_the_transfer_saga_conserves_money_on_every_ending(db_url: str) -> None:
    """Done, refused deposit, timed-out deposit that still ran late: the money is where
    the transfer's status says, never created nor lost."""
    assert run_scenarios(db_url) == {
        "ok": {"status": "done", "source": 70, "destination": 30},
        "frozen": {"status": "compensated: credit rejected", "source": 100, "destination": 0},
        "timeout": {"status": "compensated: credit timed_out", "source": 100, "destination": 0},
    }
