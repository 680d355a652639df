#!/usr/bin/env python
"""Render a ``run.py --json`` report as the Markdown tables of docs/benchmarks.md.

Usage::

    .venv/bin/python benchmarks/to_markdown.py results.json > tables.md
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

JS_ANCHOR = {"sqlite": 57.0, "postgresql": 39.0}


def f(value: float | None, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def headline(reports: dict[str, Any]) -> list[str]:
    out = [
        "| database | conc | Solid Objects calls/s | p50 ms | p99 ms | write tx/call | "
        "raw commits/s | fraction of raw | DBOS wf/s | DBOS p99 ms | x DBOS | JS (published) "
        "| x JS |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, r in reports.items():
        raw = {x["threads"]: x for x in r["raw"]}
        dbos = (r.get("dbos") or {"cells": []})["cells"]
        for c in r["cells"]:
            if (c["shape"], c["mode"], c["processes"]) != ("warm", "call", 0):
                continue
            conc = c["concurrency"]
            peer = next(
                (
                    d
                    for d in dbos
                    if (d["shape"], d["concurrency"]) == ("warm", conc) and not d.get("stalled")
                ),
                None,
            )
            js = JS_ANCHOR.get(r["database"]) if conc == 16 else None
            rr = raw.get(conc)
            out.append(
                f"| {kind} | {conc} | **{c['ops_per_s']:,.0f}** | {c['p50_ms']:.2f} | "
                f"{c['p99_ms']:.2f} | {c['write_tx_per_call']:.2f} | "
                f"{f(None if rr is None else rr['commits_per_s'], ',.0f')} | "
                f"{f(c['fraction_of_raw'], '.3f')} | "
                f"{f(None if peer is None else peer['ops_per_s'], ',.0f')} | "
                f"{f(None if peer is None else peer['p99_ms'], '.0f')} | "
                f"{f(None if peer is None else c['ops_per_s'] / peer['ops_per_s'], '.1f')} | "
                f"{f(js, '.0f')} | {f(None if js is None else c['ops_per_s'] / js, '.0f')} |"
            )
    return out


def cells(kind: str, r: dict[str, Any]) -> list[str]:
    out = [
        f"#### {kind}",
        "",
        "| shape | mode | conc | procs | ops/s | p50 ms | p95 ms | p99 ms | write tx/call | "
        "db commits/call | server wtx/call | stmts/call | CPU ms/call | fraction of raw |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in sorted(
        r["cells"],
        key=lambda c: (
            c["processes"],
            c["concurrency"],
            ("hot", "warm", "new").index(c["shape"]),
            c["mode"],
        ),
    ):
        out.append(
            f"| {c['shape']} | {c['mode']} | {c['concurrency']} | {c['processes']} | "
            f"{c['ops_per_s']:,.0f} | {c['p50_ms']:.2f} | {c['p95_ms']:.2f} | "
            f"{c['p99_ms']:.2f} | {c['write_tx_per_call']:.2f} | "
            f"{c['db_commits_per_call']:.2f} | {f(c.get('server_write_tx_per_call'), '.2f')} | "
            f"{f(c['statements_per_call'], '.1f')} | {c['cpu_s_per_call'] * 1000:.2f} | "
            f"{f(c['fraction_of_raw'], '.3f')} |"
            + (f" ({c['errors']} failed)" if c["errors"] else "")
        )
    return out


def raw_table(reports: dict[str, Any]) -> list[str]:
    out = [
        "| database | threads | commits/s | tx p50 ms | tx p99 ms | client CPU µs/commit |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind, r in reports.items():
        for x in r["raw"]:
            out.append(
                f"| {kind} | {x['threads']} | {x['commits_per_s']:,.0f} | "
                f"{x['p50_ms']:.3f} | {x['p99_ms']:.3f} | "
                f"{x['cpu_s_per_commit'] * 1e6:.0f} |"
            )
    return out


def dbos_table(reports: dict[str, Any]) -> list[str]:
    out = [
        "| database | shape | conc | DBOS wf/s | p50 ms | p95 ms | p99 ms | "
        "commits/wf | CPU ms/wf | Solid Objects calls/s (call, 1 process) | ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, r in reports.items():
        if not r.get("dbos"):
            continue
        for d in r["dbos"]["cells"]:
            if d.get("stalled"):
                out.append(
                    f"| {kind} | {d['shape']} | {d['concurrency']} | stalled "
                    "(no cell finished within the budget; killed) | | | | | | | |"
                )
                continue
            so = next(
                (
                    c
                    for c in r["cells"]
                    if (c["shape"], c["mode"], c["concurrency"], c["processes"])
                    == (d["shape"], "call", d["concurrency"], 0)
                ),
                None,
            )
            out.append(
                f"| {kind} | {d['shape']} | {d['concurrency']} | {d['ops_per_s']:,.0f} | "
                f"{d['p50_ms']:.1f} | {d['p95_ms']:.1f} | {d['p99_ms']:.1f} | "
                f"{d['commits_per_call']:.2f} | {d['cpu_s_per_call'] * 1000:.2f} | "
                f"{f(None if so is None else so['ops_per_s'], ',.0f')} | "
                f"{f(None if so is None else so['ops_per_s'] / d['ops_per_s'], '.1f')} |"
            )
    return out


def idle_table(reports: dict[str, Any]) -> list[str]:
    out = [
        "| database | when | cached activations | actors in db | CPU s per minute | "
        "statements/s | write tx/s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for kind, r in reports.items():
        for i in r["idle"]:
            out.append(
                f"| {kind} | {i['when']} | {i['cached_activations']} | "
                f"{i['actors_in_database']:,} | {i['cpu_s_per_s'] * 60:.2f} | "
                f"{f(i['statements_per_s'], '.1f')} | {i['write_tx_per_s']:.2f} |"
            )
    return out


def main() -> int:
    data = json.loads(Path(sys.argv[1]).read_text())
    reports = data["databases"]
    lines = [
        "### Headline",
        "",
        *headline(reports),
        "",
        "### Raw limit",
        "",
        *raw_table(reports),
        "",
        "### DBOS",
        "",
        *dbos_table(reports),
        "",
        "### Idle",
        "",
        *idle_table(reports),
        "",
        "### Every cell",
        "",
    ]
    for kind, r in reports.items():
        lines += [*cells(kind, r), ""]
    lines += ["### Targets", ""]
    for kind, r in reports.items():
        for t in r["targets"]:
            verdict = {True: "met", False: "**missed**", None: "n/a"}[t["met"]]
            lines.append(
                f"- {kind}: {t['target']}: {f(t['measured'], '.3g')} {t['unit']} → {verdict}"
            )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
