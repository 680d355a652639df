"""The benchmark harness runs: ``benchmarks/bench_calls.py --quick`` end to end.

It checks that the command exits 0 and writes well-formed JSON with positive
numbers, and that it removes its temporary database. It asserts nothing about
performance: timings on a shared machine are never a test (see docs/benchmarks.md).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_calls.py"


def positive(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and (math.isfinite(value) and value > 0)
    )


def non_negative(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value >= 0


def test_quick_benchmark_writes_well_formed_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "targets of this stage" in proc.stdout
    assert list(scratch.iterdir()) == [], "the temporary database was not removed"

    report = json.loads(out.read_text())
    assert report["machine"]["sqlite_library"]
    assert report["settings"]["concurrency"] == [1, 16]

    cells = report["cells"]
    assert {(c["shape"], c["mode"], c["concurrency"]) for c in cells} == {
        (shape, mode, conc)
        for shape in ("hot", "warm", "new")
        for mode in ("call", "send")
        for conc in (1, 16)
    }
    for cell in cells:
        where = f"{cell['shape']}/{cell['mode']}/c{cell['concurrency']}"
        assert cell["errors"] == 0, where
        assert cell["processes"] == 0, where
        for name in (
            "calls",
            "seconds",
            "ops_per_s",
            "p50_ms",
            "p95_ms",
            "p99_ms",
            "write_tx_per_call",
            "db_commits_per_call",
            "statements_per_call",
            "cpu_s_per_call",
            "fraction_of_raw",
        ):
            assert positive(cell[name]), f"{where} {name} = {cell[name]!r}"
        assert cell["p50_ms"] <= cell["p95_ms"] <= cell["p99_ms"] <= cell["max_ms"], where
        assert cell["db_commits_per_call"] <= cell["write_tx_per_call"] + 1e-9, where
        assert len(cell["runs"]) == report["settings"]["repeat"], where

    assert [r["threads"] for r in report["raw"]] == [1, 16]
    for raw in report["raw"]:
        for name in ("commits_per_s", "p50_ms", "p99_ms"):
            assert positive(raw[name]), f"raw c{raw['threads']} {name} = {raw[name]!r}"

    assert [(i["when"], i["cached_activations"]) for i in report["idle"]] == [
        ("before", 0),
        ("before", 100),
        ("after", 0),
    ]
    for idle in report["idle"]:
        assert positive(idle["seconds"])
        assert non_negative(idle["actors_in_database"])
        for name in ("cpu_s_per_s", "statements_per_s", "write_tx_per_s", "db_commits_per_s"):
            assert non_negative(idle[name]), f"idle {name} = {idle[name]!r}"

    assert len(report["targets"]) == 3
    for target in report["targets"]:
        assert isinstance(target["met"], bool), target
        assert positive(target["measured"]), target


def test_quick_outbox_benchmark_fires_every_reminder_and_runs_every_effect(
    tmp_path: Path,
) -> None:
    out = tmp_path / "outbox.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_outbox.py"),
            "--quick",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(out.read_text())
    delay, effects = results["firing_delay"], results["effects"]
    assert delay["fired"] == delay["reminders"] > 0 and delay["early"] == 0
    assert non_negative(delay["median_ms"]) and non_negative(delay["max_ms"])
    assert effects["done"] == effects["effects"] > 0 and positive(effects["effects_per_s"])
