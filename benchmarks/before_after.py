#!/usr/bin/env python
"""Before and after in one run: ``run.py`` under two virtualenvs, alternating.

Each side is a Python whose virtualenv has the library installed (for example a
second worktree at the earlier commit with its own ``.venv``). This script runs
*this* tree's ``benchmarks/run.py`` with that Python, so the harness is the same
and only the imported library differs. Each pass runs every group (a database
and its wake-up paths) once per side, before then after, and keeps each run's
JSON. The table is made from the medians over the passes of same-run figures:
rates, p99, CPU per call, and the ratios (send to call, topology to in-process
and to raw) taken within each run before the median.

Usage::

    .venv/bin/python benchmarks/before_after.py \\
        --before ../wt-before/.venv/bin/python --after ../wt-after/.venv/bin/python \\
        --passes 3 --out ba/ -- --shapes warm --modes call,send --concurrency 16 \\
        --calls 2000 --warmup 100 --processes 4 --raw-seconds 2 --idle-seconds 0 \\
        --dbos-python none --profile
    .venv/bin/python benchmarks/before_after.py --table ba/     # the table again

A wake-up path the side's library lacks (``peer`` before it existed) is left out
for that side. Everything after ``--`` goes to ``run.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: database -> wake-up paths (``run.py --wakeup``); the default is the issue's table.
GROUPS = {
    "sqlite": ["default"],
    "postgresql": ["default", "peer"],
    "mariadb": ["default", "redis", "peer"],
}
SIDES = ("before", "after")


def supports_peer(python: str) -> bool:
    """Whether the library that ``python`` imports has the broker-less wake-up."""
    probe = (
        "import importlib.util, sys; "
        "sys.exit(importlib.util.find_spec('solid_objects.engine.peers') is None)"
    )
    return subprocess.run([python, "-c", probe], check=False).returncode == 0


def run_side(python: str, database: str, wakeups: list[str], out: Path, extra: list[str]) -> int:
    command = [
        python,
        str(HERE / "run.py"),
        "--databases",
        database,
        "--wakeup",
        ",".join(wakeups),
        "--json",
        str(out),
        *extra,
    ]
    print(f"$ {' '.join(command)}", file=sys.stderr, flush=True)
    log = out.with_suffix(".log")
    with log.open("w") as f:
        return subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, check=False).returncode


def cell(report: dict[str, Any], mode: str, processes: int) -> dict[str, Any] | None:
    for c in report["cells"]:
        if (c["shape"], c["mode"], c["processes"]) == ("warm", mode, processes):
            return c
    return None


def figures(report: dict[str, Any]) -> dict[str, float | None]:
    """The table's figures of one run (one database and wake-up path)."""
    raw = report["raw"][0]["commits_per_s"] if report["raw"] else None
    call, send = cell(report, "call", 0), cell(report, "send", 0)
    topo = next(
        (c for c in report["cells"] if c["processes"] and c["mode"] == "call"), None
    )
    topo_send = next(
        (c for c in report["cells"] if c["processes"] and c["mode"] == "send"), None
    )

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or not b else a / b

    f: dict[str, float | None] = {
        "raw": raw,
        "call": call and call["ops_per_s"],
        "call_cpu_ms": call and call["cpu_s_per_call"] * 1000,
        "call_p99": call and call["p99_ms"],
        "send": send and send["ops_per_s"],
        "send_cpu_ms": send and send["cpu_s_per_call"] * 1000,
        "topo": topo and topo["ops_per_s"],
        "topo_p50": topo and topo["p50_ms"],
        "topo_p99": topo and topo["p99_ms"],
        "topo_cpu_ms": topo and topo["cpu_s_per_call"] * 1000,
        "topo_statements": topo and topo["statements_per_call"],
        "topo_send": topo_send and topo_send["ops_per_s"],
    }
    f["send_of_call"] = ratio(f["send"], f["call"])
    f["topo_of_call"] = ratio(f["topo"], f["call"])
    f["topo_of_raw"] = ratio(f["topo"], f["raw"])
    f["call_of_raw"] = ratio(f["call"], f["raw"])
    return f


def collect(out: Path) -> dict[tuple[str, str], list[dict[str, float | None]]]:
    """(side, database+path) -> the figures of each pass, from the saved JSON."""
    runs: dict[tuple[str, str], list[dict[str, float | None]]] = {}
    for path in sorted(out.glob("pass*-*-*.json")):
        side = path.stem.split("-")[1]
        for key, report in json.loads(path.read_text())["databases"].items():
            runs.setdefault((side, key), []).append(figures(report))
    return runs


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def table(out: Path) -> str:
    runs = collect(out)
    head = (
        "| database, wake-up | side | passes | raw commits/s | in-process calls/s (CPU ms) "
        "| in-process / raw | send()/s (of call) | topology calls/s | of in-process | of raw "
        "| topology p50 / p99 ms | topology CPU ms/call | statements/call |"
    )
    lines = [head, "|" + "---|" * 13]

    def n(v: float | None, spec: str = ",.0f") -> str:
        return "-" if v is None else format(v, spec)

    order = [f"{d}{'' if w == 'default' else '+' + w}" for d, ws in GROUPS.items() for w in ws]
    for key in order:
        for side in SIDES:
            passes = runs.get((side, key))
            if not passes:
                continue
            m = {k: median([p[k] for p in passes]) for k in passes[0]}
            lines.append(
                f"| {key} | {side} | {len(passes)} | {n(m['raw'])} | {n(m['call'])} "
                f"({n(m['call_cpu_ms'], '.2f')}) | {n(m['call_of_raw'], '.2f')} | "
                f"{n(m['send'])} ({n(m['send_of_call'], '.2f')}) | {n(m['topo'])} | "
                f"{n(m['topo_of_call'], '.2f')} | {n(m['topo_of_raw'], '.2f')} | "
                f"{n(m['topo_p50'], '.1f')} / {n(m['topo_p99'], '.0f')} | "
                f"{n(m['topo_cpu_ms'], '.2f')} | {n(m['topo_statements'], '.2f')} |"
            )
    loads = []
    for path in sorted(out.glob("pass*-*-*.json")):
        for report in json.loads(path.read_text())["databases"].values():
            machine = report["machine"]
            loads += [machine["load_average"][0], machine["load_average_end"][0]]
    if loads:
        lines.append("")
        lines.append(f"load average (1 min) over the runs: {min(loads):.1f} to {max(loads):.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", help="python of the virtualenv with the earlier library")
    p.add_argument("--after", help="python of the virtualenv with the later library")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument(
        "--databases", default=",".join(GROUPS), help="comma-separated, of " + ",".join(GROUPS)
    )
    p.add_argument("--out", type=Path, help="directory for each run's JSON and log")
    p.add_argument("--table", type=Path, help="print the table of an earlier --out and exit")
    args = p.parse_args(argv)
    if args.table is not None:
        print(table(args.table))
        return 0
    if not (args.before and args.after and args.out):
        p.error("--before, --after and --out are required (or --table DIR)")
    args.out.mkdir(parents=True, exist_ok=True)
    pythons = {"before": args.before, "after": args.after}
    peer = {side: supports_peer(py) for side, py in pythons.items()}
    status = 0
    for n in range(1, args.passes + 1):
        for database in [d.strip() for d in args.databases.split(",") if d.strip()]:
            for side in SIDES:
                wakeups = [w for w in GROUPS[database] if w != "peer" or peer[side]]
                out = args.out / f"pass{n}-{side}-{database}.json"
                started = time.monotonic()
                rc = run_side(pythons[side], database, wakeups, out, extra)
                status = max(status, rc)
                print(
                    f"pass {n} {side} {database}: exit {rc} in {time.monotonic() - started:.0f} s, "
                    f"load {os.getloadavg()[0]:.1f}",
                    file=sys.stderr,
                    flush=True,
                )
    print(table(args.out))
    return status


if __name__ == "__main__":
    sys.exit(main())
