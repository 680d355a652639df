"""The benchmark harness runs: ``bench_calls.py --quick`` and ``run.py --quick`` end to end.

It checks that the commands exit 0 and write well-formed JSON with positive
numbers, that the raw limit and the server-side counts work on every backend,
and that temporary databases are removed. It asserts nothing about
performance: timings on a shared machine are never a test (see docs/benchmarks.md).
The DBOS peer needs its own virtualenv and is not run here.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy

# One xdist worker runs them all: each checks that its run dropped its scratch database
# by listing every solid_bench_* database, so two at once would see each other's.
# The timeout counts the wait for the lock below, behind the other workers' benchmarks.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("benchmark_scratch_databases"),
    pytest.mark.timeout(900),
]


@pytest.fixture(autouse=True)
def one_benchmark_at_a_time() -> Iterator[None]:
    """A file lock as well: the xdist group is not always honoured (seen: two of these
    tests on two workers at once, each then finding the other's scratch database)."""
    with open("/tmp/solid-bench-scratch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield

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
    assert "targets (100 warm identities, concurrency 16" in proc.stdout
    assert list(scratch.iterdir()) == [], "the temporary database was not removed"

    report = json.loads(out.read_text())
    assert report["machine"]["sqlite_library"]
    assert report["database"] == "sqlite" and report["dbos"] is None
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
        assert cell["server_write_tx_per_call"] is None, where
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

    targets = {t["target"]: t for t in report["targets"]}
    assert len(targets) == 5
    for name, target in targets.items():
        if "DBOS" in name:  # no DBOS run here
            assert target["met"] is None and target["measured"] is None, target
        else:
            assert isinstance(target["met"], bool), target
            assert positive(target["measured"]), target


def test_quick_side_by_side_run_on_each_backend(backend: str, tmp_path: Path) -> None:
    """``run.py`` on one backend: a fresh scratch database, the raw limit with the same
    driver, the deployed topology (4 worker processes and a caller-only process)
    with its per-role profile, the server's own transaction count;
    the scratch database is dropped afterwards."""
    kind = "mariadb" if backend == "mysql" else backend
    out = tmp_path / "side.json"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "run.py"),
        "--databases",
        kind,
        "--quick",
        "--shapes",
        "warm",
        "--modes",
        "call,send",
        "--concurrency",
        "1,16",
        "--calls",
        "60",
        "--warmup",
        "10",
        "--processes",
        "4",
        "--profile",
        "--idle-seconds",
        "0.3",
        "--dbos-python",
        "none",
        "--json",
        str(out),
    ]
    for option, variable in (
        ("--postgres-url", "SOLID_TEST_POSTGRES_URL"),
        ("--mysql-url", "SOLID_TEST_MYSQL_URL"),
    ):
        if os.environ.get(variable):
            command += [option, os.environ[variable]]
    before = scratch_databases(kind)
    proc = subprocess.run(
        command,
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(scratch)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Side by side" in proc.stdout
    assert list(scratch.iterdir()) == [], "a temporary file was not removed"
    assert scratch_databases(kind) == before, "the scratch database was not dropped"

    report = json.loads(out.read_text())["databases"][kind]
    assert report["database"] == ("mysql" if kind == "mariadb" else kind)
    assert report["server_version"]
    assert [r["threads"] for r in report["raw"]] == [1, 16]
    assert all(positive(r["commits_per_s"]) for r in report["raw"])
    cells = {(c["concurrency"], c["mode"], c["processes"]): c for c in report["cells"]}
    assert set(cells) == {
        (conc, mode, procs) for conc in (1, 16) for mode in ("call", "send") for procs in (0, 4)
    }
    for where, cell in cells.items():
        roles = cell["profile"]
        assert set(roles) == ({"caller", "workers"} if where[2] else {"process"}), where
        if where[2]:
            assert (len(roles["caller"]), len(roles["workers"])) == (1, 4), where
        for processes in roles.values():
            for process in processes:
                assert non_negative(process["cpu_ms_per_call"]), (where, process)
        assert positive(sum(p["statements_per_call"] for ps in roles.values() for p in ps))
        assert cell["errors"] == 0, where
        for name in (
            "ops_per_s",
            "p99_ms",
            "write_tx_per_call",
            "statements_per_call",
            "cpu_s_per_call",
            "fraction_of_raw",
        ):
            assert positive(cell[name]), f"{where} {name} = {cell[name]!r}"
        if kind == "sqlite":
            assert cell["server_write_tx_per_call"] is None, where
        else:  # server-wide; below 1 per call where enqueues share a transaction
            assert positive(cell["server_write_tx_per_call"]), where
    assert len(report["idle"]) == 3


def test_quick_topology_runs_on_each_wakeup_path(backend: str, tmp_path: Path) -> None:
    """``run.py --wakeup default,peer``: the topology cell (4 worker processes and a
    caller-only process) once on the database's own path and once with datagrams
    between the processes, each on a scratch database of its own, dropped after."""
    kind = "mariadb" if backend == "mysql" else backend
    out = tmp_path / "wakeups.json"
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "run.py"),
        *("--databases", kind, "--quick", "--shapes", "warm", "--modes", "call"),
        *("--concurrency", "16", "--calls", "60", "--warmup", "10", "--processes", "4"),
        *("--idle-seconds", "0.3", "--dbos-python", "none", "--wakeup", "default,peer"),
        *("--json", str(out)),
    ]
    for option, variable in (
        ("--postgres-url", "SOLID_TEST_POSTGRES_URL"),
        ("--mysql-url", "SOLID_TEST_MYSQL_URL"),
    ):
        if os.environ.get(variable):
            command += [option, os.environ[variable]]
    before = scratch_databases(kind)
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Wake-up paths" in proc.stdout
    assert scratch_databases(kind) == before, "a scratch database was not dropped"
    reports = json.loads(out.read_text())["databases"]
    assert set(reports) == {kind, f"{kind}+peer"}
    assert reports[kind]["settings"]["wakeup"] == "default"
    assert reports[f"{kind}+peer"]["settings"]["wakeup_url"] == "peer://"
    for key, report in reports.items():
        cells = {c["processes"]: c for c in report["cells"]}
        assert set(cells) == {0, 4}, key
        for cell in cells.values():
            assert cell["errors"] == 0, key
            assert positive(cell["ops_per_s"]) and positive(cell["p99_ms"]), key


def scratch_databases(kind: str) -> set[str]:
    """Names of the harness's scratch schemas (PostgreSQL) or databases (MariaDB)."""
    if kind == "sqlite":
        return set()
    variable = "SOLID_TEST_POSTGRES_URL" if kind == "postgresql" else "SOLID_TEST_MYSQL_URL"
    engine = sqlalchemy.create_engine(os.environ[variable])
    query = sqlalchemy.text(
        "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE :pattern"
    )
    try:
        with engine.connect() as conn:
            return {str(row[0]) for row in conn.execute(query, {"pattern": "solid_bench_%"})}
    finally:
        engine.dispose()


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


def test_takeover_benchmark_kills_a_worker_and_loses_no_call(tmp_path: Path) -> None:
    """``bench_takeover.py`` on SQLite, one kill: the victim's actors answer again, and
    every call returned once (the script exits 1 on a failed, lost or doubled call)."""
    out = tmp_path / "takeover.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_takeover.py"),
            "--databases",
            "sqlite",
            "--kills",
            "1",
            "--between",
            "1",
            "--window",
            "2",
            "--actors",
            "10",
            "--concurrency",
            "4",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    (result,) = json.loads(out.read_text())
    assert result["kills"] == 1 and result["calls"] > 0
    assert result["failed"] == 0 and result["lost_or_doubled"] == 0
    assert non_negative(result["answering_max_s"]) and non_negative(result["stall_max_s"])


def test_state_columns_benchmark_measures_every_class(tmp_path: Path) -> None:
    """``bench_state_columns.py`` on SQLite, small: every class has a rate, CPU and a
    statement count, and a projected turn runs one statement more than a plain one."""
    out = tmp_path / "state.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_state_columns.py"),
            "--databases",
            "sqlite",
            "--calls",
            "40",
            "--passes",
            "1",
            "--actors",
            "4",
            "--size-actors",
            "5",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    (result,) = json.loads(out.read_text())
    cells = result["cells"]
    assert set(cells) == {"text", "json", "projected", "journaled"}
    assert all(
        positive(c["calls_per_s"]) and positive(c["cpu_ms_per_call"]) for c in cells.values()
    )
    assert cells["projected"]["statements_per_call"] > cells["json"]["statements_per_call"]
    assert cells["journaled"]["statements_per_call"] > cells["json"]["statements_per_call"]


def test_request_benchmark_runs_both_shapes(tmp_path: Path) -> None:
    """``bench_requests.py`` on SQLite, small: requests and plain sends both finish
    their round trips, each with a rate and a statement count."""
    out = tmp_path / "requests.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_requests.py"),
            "--databases",
            "sqlite",
            "--askers",
            "2",
            "--rounds",
            "3",
            "--passes",
            "1",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    (result,) = json.loads(out.read_text())
    assert set(result["cells"]) == {"request", "sends"}
    for cell in result["cells"].values():
        assert positive(cell["round_trips_per_s"]) and positive(cell["statements_per_round_trip"])


def test_lone_send_benchmark_measures_both_modes(tmp_path: Path) -> None:
    """``bench_lone_send.py`` on SQLite, small: both modes have a wall time and a CPU
    time per send (the one-statement path exists on PostgreSQL only)."""
    out = tmp_path / "lone.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_lone_send.py"),
            "--databases",
            "sqlite",
            "--sends",
            "20",
            "--passes",
            "1",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    (result,) = json.loads(out.read_text())
    assert result["available"] is False
    assert set(result["cells"]) == {"one statement", "transaction"}
    for cell in result["cells"].values():
        assert positive(cell["wall_us_per_send"]) and positive(cell["cpu_us_per_send"])


def test_quick_scaling_study_runs_every_study(tmp_path: Path) -> None:
    """``scaling.py --quick``: every study yields numbers and the drained counter is exact."""
    out = tmp_path / "scaling.json"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "scaling.py"), "--quick", "--json", str(out)],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(scratch)},
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert list(scratch.iterdir()) == [], "the temporary database was not removed"
    report = json.loads(out.read_text())
    assert [r["rows"] for r in report["rows"]] == [110, 200]
    for step in report["rows"]:
        for shape in ("warm", "spread"):
            assert step[shape]["errors"] == 0 and positive(step[shape]["ops_per_s"]), step
    assert [s["state_bytes"] for s in report["state"]] == [100, 10_000]
    assert all(s["errors"] == 0 and positive(s["ops_per_s"]) for s in report["state"])
    assert [d["depth"] for d in report["depth"]] == [1, 10]
    for cell in report["depth"]:
        assert positive(cell["drain_turns_per_s"]) and positive(cell["write_tx_per_message"])
    fill = report["fill"]
    assert [s["actors"] for s in fill["steps"]] == [100, 1_000]
    for step in fill["steps"]:
        for shape in ("warm", "cold"):
            assert step[shape]["errors"] == 0 and positive(step[shape]["p50_ms"]), step
        assert all(positive(v) for v in step["sizes"]["tables"].values()), step
    assert fill["prune"]["rows"] == 2_000, fill
    # Cold calls may have touched every filled actor: expiry deletes what the dry run counted.
    assert fill["expire_actors"]["rows"] == fill["expirable"], fill


def test_quick_expire_study_expires_every_filled_actor(tmp_path: Path) -> None:
    """``scaling.py --studies expire --quick``: the 1,000 filled quiet actors all expire."""
    out = tmp_path / "expire.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "scaling.py"),
            "--studies",
            "expire",
            "--quick",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    expire = json.loads(out.read_text())["expire"]
    assert expire["actors"] == 1_000 and expire["rows"] == 1_000, expire
    assert positive(expire["rows_per_s"]) and positive(expire["statements_per_actor"]), expire


def test_quick_effect_limits_benchmark_holds_the_rate(tmp_path: Path) -> None:
    """``bench_effect_limits.py --quick`` on SQLite: two worker processes run every
    effect, and no window of ``per`` holds more starts than the rate (the script exits
    1 otherwise)."""
    out = tmp_path / "limits.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_effect_limits.py"),
            "--quick",
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["effects"] == 30 and result["most_in_window"] <= result["limit_count"]
    assert positive(result["observed_per_s"])
