#!/usr/bin/env python
"""Benchmark realtime delivery: commit-to-DOM latency and fan-out throughput.

Serves ``examples.live_counter`` with uvicorn in a subprocess (its own runtime and
workers), then:

- **commit-to-DOM**: one Chromium page (Playwright, ``/usr/bin/chromium``) shows the
  counter; the script POSTs ``/increment`` one at a time and, for each value, takes
  the time from the POST's response (the commit was acknowledged) to the moment a
  ``MutationObserver`` in the page saw ``#value`` show it. The same clock (the
  machine's wall clock) is read on both sides.
- **fan-out**: ``N`` WebSocket subscribers (the ``websockets`` asyncio client, in
  this process) follow one counter while the script commits ``--updates``
  increments as fast as the server takes them; it reports deliveries per second
  (frames received by all subscribers) and the latency from each commit's
  acknowledgement to each subscriber's frame.

Results go to stdout (and ``--json``); ``docs/benchmarks.md`` records a run.

Examples::

    python benchmarks/bench_realtime.py --quick
    python benchmarks/bench_realtime.py --subscribers 1,10,100,500 --updates 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Server:
    def __init__(self, database: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
        command = [sys.executable, "-m", "examples.live_counter", "--port", str(self.port)]
        self.process = subprocess.Popen(
            [*command, "--database", database],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(self.base + "/", timeout=5).close()
                return
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise SystemExit("the example server did not start") from None
                time.sleep(0.1)

    def increment(self, counter: str) -> tuple[int, float]:
        """POST one increment: the committed value, and the wall-clock time it arrived."""
        request = urllib.request.Request(
            f"{self.base}/increment?counter={counter}&user=bench", method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            value = int(json.loads(response.read())["value"])
        return value, time.time()

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=60)


def commit_to_dom(server: Server, count: int) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    latencies: list[float] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(f"{server.base}/?counter=dom&user=viewer")
        page.wait_for_function("document.querySelector('#status').textContent === 'live'")
        page.evaluate(
            """() => {
                window.benchSeen = {};
                const target = document.querySelector('#value');
                new MutationObserver(() => { window.benchSeen[target.textContent] = Date.now(); })
                    .observe(target, {childList: true, characterData: true, subtree: true});
            }"""
        )
        start = int(page.locator("#value").text_content() or "0")
        for n in range(start + 1, start + count + 1):
            _, acknowledged = server.increment("dom")
            page.wait_for_function(f"window.benchSeen['{n}'] !== undefined", timeout=60_000)
            seen = page.evaluate(f"window.benchSeen['{n}']")
            latencies.append(seen / 1000 - acknowledged)
        browser.close()
    return summary(latencies) | {"updates": count}


def summary(latencies: list[float]) -> dict[str, Any]:
    ms = [max(0.0, x) * 1000 for x in latencies]
    return {
        "p50_ms": round(statistics.median(ms), 2),
        "p99_ms": round(percentile(ms, 0.99), 2),
        "max_ms": round(max(ms), 2),
    }


async def fan_out(server: Server, subscribers: int, updates: int) -> dict[str, Any]:
    import websockets

    counter = f"fan-{subscribers}-{time.time_ns()}"
    url = f"ws://127.0.0.1:{server.port}/live/ws?user=bench"
    arrivals: list[dict[int, float]] = [{} for _ in range(subscribers)]
    subscribed = asyncio.Semaphore(0)

    async def follow(index: int) -> None:
        async with websockets.connect(url, max_size=None, compression=None) as ws:
            await ws.recv()  # welcome
            request = {"v": 1, "type": "subscribe", "id": "s"}
            request |= {"actor_type": "LiveCounter", "actor_id": counter}
            await ws.send(json.dumps(request))
            await ws.recv()  # the snapshot of the counter that does not exist yet
            subscribed.release()
            async for raw in ws:
                frame = json.loads(raw)
                if frame["type"] in ("snapshot", "change") and "value" in frame["values"]:
                    value = frame["values"]["value"]
                    arrivals[index][value] = time.time()
                    if value >= updates:
                        return

    tasks = [asyncio.create_task(follow(i)) for i in range(subscribers)]
    for _ in range(subscribers):
        await subscribed.acquire()
    acknowledged: dict[int, float] = {}
    start = time.time()
    for _ in range(updates):
        value, at = await asyncio.to_thread(server.increment, counter)
        acknowledged[value] = at
    await asyncio.wait(tasks, timeout=120)
    elapsed = max((max(a.values()) for a in arrivals if a), default=time.time()) - start
    for task in tasks:
        task.cancel()
    delivered = sum(len(a) for a in arrivals)
    latencies = [a[v] - acknowledged[v] for a in arrivals for v in a if v in acknowledged]
    return {
        "subscribers": subscribers,
        "updates": updates,
        "updates_per_s": round(updates / elapsed, 1),
        "deliveries_per_s": round(delivered / elapsed, 1),
        "delivered_fraction": round(delivered / (subscribers * updates), 3),
        **summary(latencies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", help="database URL (default: a temporary SQLite file)")
    parser.add_argument("--quick", action="store_true", help="a small run")
    parser.add_argument("--dom-updates", type=int, default=100)
    parser.add_argument("--subscribers", default="1,10,100")
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    if args.quick:
        args.dom_updates, args.subscribers, args.updates = 20, "1,10", 30
    folder = tempfile.mkdtemp(prefix="bench-realtime-")
    database = args.database or f"sqlite:///{folder}/live.db"
    server = Server(database)
    results: dict[str, Any] = {"database": database.split(":")[0]}
    try:
        if os.path.exists(CHROMIUM):
            results["commit_to_dom"] = commit_to_dom(server, args.dom_updates)
            print("commit-to-DOM", results["commit_to_dom"])
        results["fan_out"] = []
        for n in [int(x) for x in args.subscribers.split(",")]:
            row = asyncio.run(fan_out(server, n, args.updates))
            results["fan_out"].append(row)
            print("fan-out", row)
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
