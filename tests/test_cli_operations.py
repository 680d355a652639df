"""The operator commands of ``solid_objects.cli.operations``: pause, pending, reminders,
processes, prune, doctor, health, ``install --sql`` and ``worker --health-port``, as real
subprocesses.

Same application and conventions as ``tests/test_cli.py``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from solid_objects import Runtime
from tests.apps.admin_app import Account, build_runtime

from .conftest import count_rows
from .test_cli import CLI, ROOT, TARGET

pytestmark = pytest.mark.slow


@pytest.fixture
def app(db_url: str, tmp_path: Path) -> Iterator[tuple[Runtime, CLI]]:
    rt = build_runtime(db_url, workers=0)
    rt.install()
    try:
        yield rt, CLI(db_url, tmp_path)
    finally:
        rt.close()


def test_pause_holds_the_mailbox_until_resume(app: tuple[Runtime, CLI]) -> None:
    rt, cli = app
    account = rt.ref(Account, "p")
    account.deposit.send(amount=1)
    rt.testing.drain()

    assert cli.ok("pause", TARGET, "Account", "p", "--reason", "audit").strip() == (
        "Account p: paused"
    )
    assert cli.ok("pause", TARGET, "Account", "p").strip() == "Account p: already paused"
    account.deposit.send(amount=2)
    assert rt.testing.drain() == 0
    (pending,) = cli.json("pending", TARGET)["items"]
    assert (pending["actor_id"], pending["queued"], pending["paused"]) == ("p", 1, True)
    assert "yes" in cli.ok("pending", TARGET, "--type", "Account")

    assert cli.json("resume", TARGET, "Account", "p") == {
        "actor_type": "Account",
        "actor_id": "p",
        "paused": False,
        "already": False,
    }
    rt.testing.drain()
    assert account.snapshot()["balance"] == 3
    assert cli.ok("pending", TARGET).strip() == "no actor has pending work"
    assert "no actor" in cli.fails(1, "pause", TARGET, "Account", "nobody")


def test_reminders_listed_paused_run_now_and_cancelled(app: tuple[Runtime, CLI]) -> None:
    rt, cli = app
    for name in ("r1", "r2"):
        rt.ref(Account, name).subscribe.send()
    rt.testing.drain()

    listed = cli.json("reminders", "list", TARGET)["items"]
    assert [(r["actor_id"], r["key"], r["every_seconds"]) for r in listed] == [
        ("r1", "monthly", 30 * 86400.0),
        ("r2", "monthly", 30 * 86400.0),
    ]
    assert "in 30.0d" in cli.ok("reminders", "list", TARGET, "--id", "r1")

    cli.ok("reminders", "pause", TARGET, "Account", "r1", "statement", "--key", "monthly")
    assert "paused: resume it first" in cli.fails(
        1, "reminders", "run-now", TARGET, "Account", "r1", "statement", "--key", "monthly"
    )
    out = cli.ok("reminders", "run-now", TARGET, "Account", "r2", "statement", "--key", "monthly")
    assert out.strip().endswith("due now")
    rt.testing.run_due_reminders(time_now(rt))
    assert rt.ref(Account, "r2").snapshot()["entries"] == ["statement"]
    assert rt.ref(Account, "r1").snapshot()["entries"] == []

    cli.ok("reminders", "cancel", TARGET, "Account", "r1", "statement", "--key", "monthly")
    assert "no reminder" in cli.fails(
        1, "reminders", "cancel", TARGET, "Account", "r1", "statement", "--key", "monthly"
    )
    assert [r["actor_id"] for r in cli.json("reminders", "list", TARGET)["items"]] == ["r2"]


def time_now(rt: Runtime) -> object:
    from datetime import UTC, datetime

    from .conftest import db_now

    return datetime.fromtimestamp(db_now(rt) / 1000 + 1, UTC)


def test_processes_listed_and_an_unknown_one_refused(app: tuple[Runtime, CLI], db_url: str) -> None:
    _rt, cli = app
    assert cli.ok("processes", "list", TARGET).strip() == "no worker processes running"
    with build_runtime(db_url, workers=1) as running:
        (proc,) = cli.json("processes", "list", TARGET)["items"]
        assert proc["owner"] == running.owner and proc["state"] == "live"
        assert proc["actor_types"] == ["Account"]
    (stopped,) = cli.json("processes", "list", TARGET, "--all")["items"]
    assert (stopped["state"], stopped["stop_reason"]) == ("stopped", "drained")
    assert "no process 'nope'" in cli.fails(1, "processes", "recover", TARGET, "nope")


def test_prune_previews_then_deletes_finished_rows(app: tuple[Runtime, CLI]) -> None:
    rt, cli = app
    for n in range(3):
        rt.ref(Account, "old").deposit.send(amount=n)
    rt.testing.drain()
    time.sleep(1.1)
    # a preview unless --execute (--dry-run is still understood, and says the same)
    preview = cli.json("prune", TARGET, "--older-than", "1s")
    assert preview["dry_run"] is True
    assert preview["rows"] == {"messages": 3, "effects": 3, "processes": 0}
    assert cli.json("prune", TARGET, "--older-than", "1s", "--dry-run")["rows"] == preview["rows"]
    shown = cli.ok("prune", TARGET, "--older-than", "1s", "--kind", "messages")
    assert "messages: would delete 3" in shown and "--execute" in shown
    assert count_rows(rt, "messages") == 3 and count_rows(rt, "audit") == 0
    out = cli.ok("prune", TARGET, "--older-than", "1s", "--kind", "messages", "--execute")
    assert "messages: deleted 3" in out and "--execute" not in out
    assert count_rows(rt, "messages") == 0 and count_rows(rt, "effects") == 3
    assert count_rows(rt, "audit") == 1
    assert "not a duration" in cli.fails(2, "prune", TARGET, "--older-than", "soon")
    assert "--older-than" in cli.fails(2, "prune", TARGET)
    assert "contradict" in cli.fails(
        2, "prune", TARGET, "--older-than", "1s", "--dry-run", "--execute"
    )


def test_expire_previews_then_deletes_idle_actors(app: tuple[Runtime, CLI]) -> None:
    rt, cli = app
    for name in ("idle", "busy"):
        rt.ref(Account, name).deposit.send(amount=1)
    rt.testing.drain()
    rt.ref(Account, "busy").subscribe.send()  # a reminder: pending work, never expires
    rt.testing.drain()
    time.sleep(0.05)
    none = cli.ok("expire", TARGET)
    assert "no actor type has a state_ttl" in none
    ttl = {"SOLID_ADMIN_APP_OPTIONS": json.dumps({"state_ttl": {"Account": 0.01}})}
    preview = cli.ok("expire", TARGET, **ttl)
    assert "Account: would delete 1" in preview and "--execute" in preview
    assert cli.json("expire", TARGET, **ttl)["actors"] == {"Account": 1}
    assert count_rows(rt, "actors") == 2 and count_rows(rt, "audit") == 0
    assert "opt-in" in cli.fails(2, "expire", TARGET, "--type", "Other", **ttl)
    refused = cli.fails(1, "expire", TARGET, "--execute", SOLID_ADMIN_APP_POLICY="read", **ttl)
    assert "actors.expire" in refused
    assert "Account: deleted 1" in cli.ok("expire", TARGET, "--execute", **ttl)
    assert count_rows(rt, "actors", "actor_id = 'idle'") == 0
    assert count_rows(rt, "actors", "actor_id = 'busy'") == 1
    assert count_rows(rt, "audit", "action = 'actors.expire'") == 1


def test_doctor_reports_each_check_and_a_real_round_trip(
    app: tuple[Runtime, CLI], tmp_path: Path
) -> None:
    _rt, cli = app
    report = cli.json("doctor", TARGET)
    checks = {c["name"]: c for c in report["checks"]}
    assert list(checks) == [
        "connection",
        "schema",
        "settings",
        "clock",
        "workers",
        "wake-up",
        "connections",
        "backlog",
        "round trip",
        "authorization",
    ]
    assert checks["round trip"]["status"] == "ok"
    assert checks["workers"]["status"] == "warn"  # nobody runs Account workers
    assert "solid-objects worker" in checks["workers"]["advice"]
    human = cli.ok("doctor", TARGET, "--no-round-trip")
    assert "[WARN] workers" in human and "doctor: warn" in human
    assert "round trip" not in human

    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    failed = cli.run("doctor", TARGET, SOLID_ADMIN_APP_DB=empty)
    assert failed.returncode == 1
    assert "[FAIL] schema: the Solid Objects tables are not installed" in failed.stdout
    assert "solid-objects install" in failed.stdout
    assert cli.run("health", TARGET, SOLID_ADMIN_APP_DB=empty).returncode == 1
    assert "schema: ok" in cli.ok("health", TARGET)


def test_install_sql_prints_the_ddl_without_running_it(tmp_path: Path) -> None:
    cli = CLI(f"sqlite:///{tmp_path / 'fresh.db'}", tmp_path)
    ddl = cli.ok("install", TARGET, "--sql")
    assert "CREATE TABLE solid_actors" in ddl and "CREATE TABLE solid_processes" in ddl
    assert "INSERT INTO solid_schema" in ddl
    assert cli.run("health", TARGET).returncode == 1  # nothing was installed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_worker_serves_a_health_endpoint(app: tuple[Runtime, CLI]) -> None:
    _rt, cli = app
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "solid_objects", "worker", TARGET, "--health-port", str(port)],
        cwd=ROOT,
        env=cli.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    status, body = r.status, json.loads(r.read())
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "the health endpoint never answered"
                time.sleep(0.1)
        assert status == 200 and body["status"] == "ok"
        assert [c["name"] for c in body["checks"]] == ["connection", "schema", "worker loop"]
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


def test_messages_cancel_cancels_a_queued_message_and_refuses_a_finished_one(
    app: tuple[Runtime, CLI],
) -> None:
    rt, cli = app
    account = rt.ref(Account, "c")
    done = account.deposit.send(amount=1)
    rt.testing.drain()
    queued = account.deposit.send(amount=2)
    assert cli.ok("messages", "cancel", TARGET, queued.id, "--reason", "typo").strip() == (
        f"{queued.id}: cancelled"
    )
    assert queued.status() == "cancelled"
    assert count_rows(rt, "audit", "action = 'messages.cancel'") == 1
    refused = cli.fails(1, "messages", "cancel", TARGET, done.id)
    assert "it already finished (completed)" in refused
    assert "holds" not in refused
    assert "no message" in cli.fails(1, "messages", "cancel", TARGET, "0" * 32)


def test_messages_cancel_says_when_a_worker_holds_the_actor(app: tuple[Runtime, CLI]) -> None:
    rt, cli = app
    queued = rt.ref(Account, "h").deposit.send(amount=1)
    # A live lease, as a worker that claimed the actor and may be running it holds it.
    rt.store.transact(
        lambda tx: tx.run(
            "UPDATE {actors} SET lease_owner = 'elsewhere', lease_token = 'x', "
            "lease_expires_at = {now} + 600000 WHERE actor_id = 'h'"
        )
    )
    refused = cli.fails(1, "messages", "cancel", TARGET, queued.id)
    assert "a worker holds its actor's lease" in refused
    assert "pause the actor" in refused
    assert "finished" not in refused
    assert queued.status() == "queued"
    assert count_rows(rt, "audit", "action = 'messages.cancel'") == 0
