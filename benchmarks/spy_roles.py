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
        ("SQLAlchemy pool", re.compile(r"sqlalchemy")),
    ("pydantic", re.compile(r"pydantic")),
    ("json", re.compile(r"\(json/|orjson|codec\.py")),
    ("store (SQL building, rows)", re.compile(r"solid_objects/store/")),
    ("engine (turns, waiters, wake-ups)", re.compile(r"solid_objects/engine/")),
    ("faces (ref, runtime)", re.compile(r"solid_objects/(ref|runtime|definition)\.py")),
    ("threading/queue", re.compile(r"\((threading|queue|concurrent/futures)")),
]


def role_of(process: str, thread: str) -> str:
    """The role of a thread: the callers, the workers, the poller and the wake-up
    listeners of either side; main threads are start-up and the harness."""
    side = "workers" if "--worker-process" in process else "caller"
    if thread.startswith("solid-poller"):
        return "poller"
    if thread.startswith(("solid-listen", "solid-peer", "solid-redis")):
        return f"wake-up ({side})"
    if thread.startswith("solid-worker"):
        return "worker" if side == "workers" else "worker (in the caller process)"
    if thread.endswith("(client)"):
        return "caller"
    if thread in ("main", "MainThread"):
        return f"start-up and harness ({side})"
    return f"other ({side}: {thread})"


#: Leaf frames where a thread waits rather than runs (py-spy may count such a thread
#: as active while it wakes or re-takes the GIL): reported apart from the CPU samples.
WAITS = [
    ("wait: server round trip", re.compile(r"^(Connection\.wait \(psycopg|.*\((pymysql|socket))")),
    (
        "wait: thread hand-off",
        re.compile(r"^(Condition\.wait|Event\.wait|.*Lock.*acquire|Queue\.get|.*tstate_lock)"),
    ),
    ("wait: sleep or select", re.compile(r"^(sleep|select|poll|epoll|.*\.select \()")),
    # A blocking recv() with a timeout: the frame that called it is the leaf.
    ("wait: socket receive", re.compile(r"^PeerWakeup\._receive \(")),
]
_THREAD = re.compile(r"thread \((\d+)\)(?:: (.*))?")


def parse(path: Path) -> dict[str, collections.Counter[str]]:
    """role -> Counter of samples: ``(cpu)`` and ``(wait)`` totals, by thread kind, by
    wait kind, by group (CPU samples only, inclusive) and by leaf frame (CPU only)."""
    roles: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        # Child processes nest under their parent: the last process frame is this one's.
        at = max((i for i, f in enumerate(frames) if f.startswith("process ")), default=-1)
        process = frames[at] if at >= 0 else ""
        rest = frames[at + 1 :]
        m = _THREAD.match(rest[0]) if rest else None
        thread = (m.group(2) or "main") if m else "?"
        body = rest[1:] if m else rest
        thread_kind = re.sub(r"[-_ ]?\d+( \(\w+\))?$", "", thread)
        role = role_of(process, thread)
        c = roles[role]
        leaf = re.sub(r":[0-9]+", "", body[-1]) if body else "?"
        wait = next((name for name, pattern in WAITS if pattern.search(leaf)), None)
        if wait is not None:
            c["(wait)"] += n
            c[f"{wait}"] += n
            continue
        c["(cpu)"] += n
        c[f"thread: {thread_kind}"] += n
        seen: set[str] = set()
        for frame in body:
            if "bench_calls.py" in frame:  # --profile's counting wrapper: not a layer
                continue
            for name, pattern in GROUPS:
                if name not in seen and pattern.search(frame):
                    seen.add(name)
                    c[f"group: {name}"] += n
        c[f"leaf: {leaf}"] += n
    return roles


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("raw", type=Path, help="py-spy -f raw output")
    p.add_argument("--leaves", type=int, default=8, help="top leaf frames per role")
    args = p.parse_args(argv)
    roles = parse(args.raw)
    total = sum(c["(cpu)"] for c in roles.values())
    for role, c in sorted(roles.items(), key=lambda kv: -kv[1]["(cpu)"]):
        cpu = c["(cpu)"] or 1
        print(
            f"\n{role}: {c['(cpu)']} CPU samples ({c['(cpu)'] / total:.1%} of all CPU), "
            f"{c['(wait)']} waiting"
        )
        for key, n in c.most_common():
            if key.startswith("wait: "):
                print(f"  {n:6d}  {key}")
        for prefix in ("thread: ", "group: "):
            for key, n in c.most_common():
                if key.startswith(prefix):
                    print(f"  {n / cpu:6.1%}  {key}")
        leaves = [(k, n) for k, n in c.most_common() if k.startswith("leaf: ")]
        for key, n in leaves[: args.leaves]:
            print(f"  {n / cpu:6.1%}  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
