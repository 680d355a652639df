"""The application the real-process tests run (see ``tests/test_processes.py``).

Worker processes run it with::

    python -m solid_objects worker tests.apps.procapp:runtime

``runtime`` is built from the environment the first time it is read, so the
test process can import the actor classes without a database:

- ``SOLID_TEST_DB``: the database URL (required for ``runtime``);
- ``SOLID_TEST_OPTIONS``: a JSON object of extra ``Runtime`` options, e.g.
  ``{"lease_duration": 1.0, "workers": 2}``.

``AppendLog.append`` makes every double or lost application visible (its
state is the list of items applied, in order), and can block on a *gate*
file so a test can catch a worker in the middle of a turn: the turn first
records a ``start`` line in a *journal* file (with the pid of the process
running it), then waits while the gate file exists, then appends the item
and records ``end``. A test that removes the gate lets the turn, and any
re-run of it by another worker, go through without blocking; a file named
``<gate>.<pid>`` lets only the process with that pid through.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from solid_objects import Actor, EffectContext, Reply, Runtime

#: Longest a turn waits on its gate file, so a forgotten gate never hangs a worker forever.
GATE_LIMIT = 30.0


def record(journal: str, event: str, actor_id: str, item: int) -> None:
    """Append one JSON line to ``journal`` with a single ``write`` (atomic with O_APPEND)."""
    line = json.dumps(
        {"event": event, "pid": os.getpid(), "actor": actor_id, "item": item, "t": time.time()}
    )
    fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def read_journal(journal: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every complete line of a journal file (none if it does not exist yet)."""
    try:
        with open(journal, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.endswith("}")]


class AppendLog(Actor):
    """Its state is the list of items applied, so a repeated or lost turn shows."""

    items: list[int] = []

    def append(
        self, item: int, gate: str | None = None, journal: str | None = None
    ) -> dict[str, int]:
        if journal is not None:
            record(journal, "start", self.actor_id, item)
        if gate is not None:
            deadline = time.monotonic() + GATE_LIMIT
            own_pass = f"{gate}.{os.getpid()}"  # lets only this process through a closed gate
            while (
                os.path.exists(gate)
                and not os.path.exists(own_pass)
                and time.monotonic() < deadline
            ):
                time.sleep(0.01)
        self.items.append(item)
        if journal is not None:
            record(journal, "end", self.actor_id, item)
        return {"length": len(self.items), "pid": os.getpid()}


class Asker(Actor):
    """Requests an ``AppendLog`` of its own id; keeps every outcome it is given."""

    replies: list[dict[str, Any]] = []

    def ask(self, gate: str | None = None, journal: str | None = None) -> str:
        return self.request(
            AppendLog, self.actor_id, reply_to=self.answered, timeout=300, context="asked"
        ).append(item=0, gate=gate, journal=journal)

    def answered(self, reply: Reply) -> None:
        outcome = {"id": reply.request_id, "status": reply.status}
        self.replies.append({**outcome, **(reply.result or {})})


class Welcome(Actor):
    """The article's onboarding decision: one commit stages the email."""

    status: str = "unsent"

    def send_email(
        self,
        gate: str | None = None,
        journal: str | None = None,
        turn_gate: str | None = None,
    ) -> str:
        if turn_gate is not None:  # hold the turn itself, before its commit
            if journal is not None:
                record(journal, "turn", self.actor_id, 0)
            deadline = time.monotonic() + GATE_LIMIT
            while os.path.exists(turn_gate) and time.monotonic() < deadline:
                time.sleep(0.01)
        if self.status == "unsent":
            self.status = "sent"
            self.emit("deliver", email=self.actor_id, gate=gate, journal=journal)
        return self.status


def deliver(ctx: EffectContext, email: str, gate: str | None, journal: str | None) -> None:
    """The mail provider call: journals each attempt's ctx.id, may block on the gate."""
    if journal is not None:
        record(journal, f"send:{ctx.id}", email, ctx.attempt)
    if gate is not None:
        deadline = time.monotonic() + GATE_LIMIT
        while os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.01)
    if journal is not None:
        record(journal, f"sent:{ctx.id}", email, ctx.attempt)


class Tally(Actor):
    """A counter: N concurrent calls must return 1..N, each exactly once."""

    value: int = 0

    def add(self, n: int = 1) -> int:
        self.value += n
        return self.value


def build_runtime(**overrides: Any) -> Runtime:
    """A runtime for ``SOLID_TEST_DB`` with ``SOLID_TEST_OPTIONS`` and ``overrides``."""
    url = os.environ.get("SOLID_TEST_DB")
    if not url:
        raise RuntimeError("set SOLID_TEST_DB to the database URL of the test")
    options = {"workers": 2, **json.loads(os.environ.get("SOLID_TEST_OPTIONS") or "{}")}
    options.update(overrides)
    runtime = Runtime(url, **options)
    runtime.register(AppendLog)
    runtime.register(Tally)
    runtime.register(Asker)
    runtime.register(Welcome)
    runtime.effect("deliver")(deliver)
    return runtime


def __getattr__(name: str) -> Any:
    # ``runtime`` is built on first access (PEP 562), from the environment of that moment.
    if name == "runtime":
        value = build_runtime()
        globals()["runtime"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
