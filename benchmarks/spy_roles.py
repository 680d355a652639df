#!/usr/bin/env python
"""Where the CPU of a topology cell goes, per process role and thread, from py-spy.

Input: ``py-spy record --subprocesses --threads -f raw`` of a ``run.py``/
``bench_calls.py`` run with ``--processes N`` (py-spy samples only threads that are
running, not waiting, unless ``--idle``: a sample is CPU). Each stack starts with its
process (the worker processes run ``bench_calls.py --worker-process``) and its thread
name. The roles: *caller* (the benchmark process: its caller threads and the
runtime's own threads), *worker* (``solid-worker-N`` threads of the worker
processes), *poller* (``solid-poller``), *wake-up* (``solid-listen``, the peer and
Redis threads), and *other* threads. For each role this prints its share of the
samples and the functions (inclusive, by module and name) it spends them in, grouped
into the library's layers and the driver.

Usage::

    py-spy record --subprocesses --threads -r 200 -f raw -o pg.txt -- \\
        .venv/bin/python benchmarks/run.py --databases postgresql --shapes warm \\
        --modes call --concurrency 16 --calls 4000 --processes 4 --topology-only \\
        --raw-seconds 0 --idle-seconds 0 --dbos-python none --profile
    .venv/bin/python benchmarks/spy_roles.py pg.txt
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

#: Function groups by frame text (file or function), first match wins; inclusive.
GROUPS = [
    ("driver: psycopg", re.compile(r"psycopg")),
    ("driver: PyMySQL", re.compile(r"pymysql")),
    ("socket wait/IO", re.compile(r"\b(recv|recv_into|sendall|send|select|poll|wait)\b \(")),
    ("SQLAlchemy pool", re.compile(r"sqlalchemy")),
    ("pydantic", re.compile(r"pydantic")),
    ("json", re.compile(r"\(json/|orjson|codec\.py")),
    ("store (SQL building, rows)", re.compile(r"solid_objects/store/")),
    ("engine (turns, waiters, wake-ups)", re.compile(r"solid_objects/engine/")),
    ("faces (ref, runtime)", re.compile(r"solid_objects/(ref|runtime|definition)\.py")),
    ("benchmark harness", re.compile(r"bench_calls\.py|raw_commit\.py")),
    ("threading/queue", re.compile(r"\((threading|queue|concurrent/futures)")),
]


def role_of(process: str, thread: str) -> str:
    worker_process = "--worker-process" in process
    if thread.startswith("solid-poller"):
        return "poller"
    if thread.startswith(("solid-listen", "solid-peer", "solid-redis")):
        return "wake-up"
    if thread.startswith("solid-worker"):
        return "worker" if worker_process else "caller: in-process workers"
    if worker_process:
        return "worker process: other"
    return "caller"


def parse(path: Path) -> dict[str, collections.Counter[str]]:
    """role -> Counter of group and of (thread kind) and of top frames, by samples."""
    roles: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        process = frames[0] if frames[0].startswith("process ") else ""
        rest = frames[1:] if process else frames
        thread = rest[0].split(": ", 1)[1] if rest and rest[0].startswith("thread ") else "?"
        thread_kind = re.sub(r"[-_ ]?\d+$", "", thread)
        role = role_of(process, thread)
        c = roles[role]
        c["(samples)"] += n
        c[f"thread: {thread_kind}"] += n
        seen: set[str] = set()
        for frame in rest[1:]:
            for name, pattern in GROUPS:
                if name not in seen and pattern.search(frame):
                    seen.add(name)
                    c[f"group: {name}"] += n
        leaf = rest[-1] if rest else "?"
        c[f"leaf: {re.sub(r':[0-9]+', '', leaf)}"] += n
    return roles


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("raw", type=Path, help="py-spy -f raw output")
    p.add_argument("--leaves", type=int, default=8, help="top leaf frames per role")
    args = p.parse_args(argv)
    roles = parse(args.raw)
    total = sum(c["(samples)"] for c in roles.values())
    for role, c in sorted(roles.items(), key=lambda kv: -kv[1]["(samples)"]):
        samples = c["(samples)"]
        print(f"\n{role}: {samples} samples, {samples / total:.1%} of all")
        for prefix in ("thread: ", "group: "):
            for key, n in c.most_common():
                if key.startswith(prefix):
                    print(f"  {n / samples:6.1%}  {key}")
        leaves = [(k, n) for k, n in c.most_common() if k.startswith("leaf: ")]
        for key, n in leaves[: args.leaves]:
            print(f"  {n / samples:6.1%}  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
