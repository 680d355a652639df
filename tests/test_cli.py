"""The operations commands of ``solid-objects``, run as real subprocesses.

The application is ``tests/apps/admin_app.py`` (its database URL, rates file,
outage file and policy come from the environment). The test process prepares
data with its own caller runtime and drains the work itself, so every state the
CLI sees is deterministic; each command is a fresh ``python -m solid_objects``
process. Database-facing tests run on every backend; the errors of loading the
target do not touch a database and run once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from solid_objects import Runtime
from solid_objects.cli import cli_principal
from tests.apps.admin_app import Account, build_runtime

from .conftest import count_rows

# Dozens of CLI subprocesses each: more than the default 120 s on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[1]
TARGET = "tests.apps.admin_app:runtime"


class CLI:
    """Runs ``python -m solid_objects`` against one database with the app's environment."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.env = {
            **os.environ,
            "SOLID_ADMIN_APP_DB": url,
            "SOLID_ADMIN_APP_RATES": str(tmp_path / "rates.json"),
            "SOLID_ADMIN_APP_OUTAGE": str(tmp_path / "outage"),
            "SOLID_ADMIN_APP_POLICY": "all",
        }
        # The package of this checkout (not whichever one the venv has installed): a
        # worktree's tests must run its own code.
        self.env["PYTHONPATH"] = str(ROOT / "src")

    def run(
        self, *args: str, stdin: str | None = None, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "solid_objects", *args],
            cwd=ROOT,
            env={**self.env, **env},
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def ok(self, *args: str, **env: str) -> str:
        done = self.run(*args, **env)
        assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stderr}"
        return done.stdout

    def json(self, *args: str, **env: str) -> Any:
        return json.loads(self.ok(*args, "--json", **env))

    def fails(self, code: int, *args: str, stdin: str | None = None, **env: str) -> str:
        """Run a command that must fail with ``code``; return its stderr (stdout is empty)."""
        done = self.run(*args, stdin=stdin, **env)
        assert done.returncode == code, (
            f"{args} exited {done.returncode}, expected {code}:\n{done.stdout}\n{done.stderr}"
        )
        assert done.stdout == ""
        return done.stderr

    def expect_all(self, cases: list[Case]) -> None:
        """Run independent failing commands side by side; each must exit with its code
        and print its message on stderr (and nothing on stdout)."""
        with ThreadPoolExecutor(4) as pool:
            done = list(pool.map(lambda c: self.run(*c.args, stdin=c.stdin, **c.env), cases))
        wrong = [
            f"{c.args} {c.env}: exited {d.returncode} (expected {c.code})\n"
            f"  stdout: {d.stdout!r}\n  stderr: {d.stderr!r}\n  expected: {c.message!r}"
            for c, d in zip(cases, done, strict=True)
            if d.returncode != c.code or c.message not in d.stderr or d.stdout
        ]
        assert not wrong, "\n".join(wrong)


@dataclass
class Case:
    """A command that must fail: its arguments, exit code and a part of its stderr."""

    code: int
    message: str
    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    stdin: str | None = None


def case(code: int, message: str, *args: str, stdin: str | None = None, **env: str) -> Case:
    return Case(code, message, args, env, stdin)


@pytest.fixture
def app(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Runtime, CLI]]:
    """The app's runtime in this process (a caller that drains), and the CLI on its database.

    The rates and outage files are the same for both (this process runs the turns).
    """
    monkeypatch.setenv("SOLID_ADMIN_APP_RATES", str(tmp_path / "rates.json"))
    monkeypatch.setenv("SOLID_ADMIN_APP_OUTAGE", str(tmp_path / "outage"))
    rt = build_runtime(db_url, workers=0)
    rt.install()
    try:
        yield rt, CLI(db_url, tmp_path)
    finally:
        rt.close()


def drain_until(rt: Runtime, message_id: str, status: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while count_rows(rt, "messages", f"id = '{message_id}' AND status = '{status}'") == 0:
        assert time.monotonic() < deadline, f"message {message_id} never became {status}"
        rt.testing.drain()
        time.sleep(0.02)


def test_operator_finds_a_poisoned_message_fixes_the_cause_and_retries_it(
    app: tuple[Runtime, CLI], tmp_path: Path
) -> None:
    rt, cli = app
    account = rt.ref(Account, "acct-1")
    account.deposit.send(amount=10)
    poisoned = account.deposit.send(amount=5, currency="CHF")  # no CHF rate yet
    account.deposit.send(amount=7)
    drain_until(rt, poisoned.id, "dead")

    # status shows it, and says where to look next
    status = cli.json("status", TARGET)
    assert status["total"]["dead_letters"] == 1
    human = cli.ok("status", TARGET)
    assert "Account" in human and f"dead-letters list {TARGET}" in human

    # the operator finds it, reads why it died, and looks at the actor
    listed = cli.json("dead-letters", "list", TARGET, "--type", "Account")
    (letter,) = listed["items"]
    assert letter["id"] == poisoned.id
    assert letter["error"] == {"type": "KeyError", "message": "'CHF'"}
    assert letter["arguments"] == {"amount": 5, "currency": "CHF"}
    table = cli.ok("dead-letters", "list", TARGET)
    assert poisoned.id in table and "KeyError: 'CHF'" in table
    shown = cli.ok("dead-letters", "show", TARGET, poisoned.id)
    assert '{"amount": 5, "currency": "CHF"}' in shown and "resolution       open" in shown
    actor = cli.json("inspect", TARGET, "Account", "acct-1")
    assert actor["state"]["entries"] == ["10 EUR", "7 EUR"]
    assert actor["open_dead_letters"] == 1
    assert "dead letters: 1 open" in cli.ok("inspect", TARGET, "Account", "acct-1")

    # fixes the cause, retries; retrying again changes nothing
    (tmp_path / "rates.json").write_text(json.dumps({"EUR": 1, "CHF": 2}))
    out = cli.ok("dead-letters", "retry", TARGET, poisoned.id, "--reason", "added the CHF rate")
    assert out.startswith(f"{poisoned.id}: retried as ")
    retry_id = out.strip().rsplit(" ", 1)[1]
    again = cli.ok("dead-letters", "retry", TARGET, poisoned.id)
    assert again.strip() == f"{poisoned.id}: already retried as {retry_id}"
    assert count_rows(rt, "messages", f"idempotency_key = 'dead-letter:{poisoned.id}'") == 1

    # the retry waits at the tail of the mailbox; later messages run after it, in order
    queued = cli.json("inspect", TARGET, "Account", "acct-1")["queued"]
    assert [m["id"] for m in queued] == [retry_id]
    account.deposit.send(amount=1)
    rt.testing.drain()
    assert account.snapshot()["entries"] == ["10 EUR", "7 EUR", "5 CHF", "1 EUR"]
    assert account.snapshot()["balance"] == 10 + 7 + 10 + 1

    assert cli.ok("dead-letters", "list", TARGET).strip() == "no open dead letters"
    (handled,) = cli.json("dead-letters", "list", TARGET, "--state", "retried")["items"]
    assert handled["retry_message_id"] == retry_id
    (entry,) = cli.json("audit", TARGET)["items"]
    assert entry["principal"] == cli_principal()
    assert entry["action"] == "dead_letters.retry" and entry["target_id"] == poisoned.id
    assert entry["detail"] == {"reason": "added the CHF rate", "retry_message_id": retry_id}


def test_actors_discard_and_retry_many_from_stdin(app: tuple[Runtime, CLI]) -> None:
    rt, cli = app
    dead = []
    for name in ("a", "b", "c"):
        dead.append(rt.ref(Account, name).deposit.send(amount=1, currency="XXX"))
    for message in dead:
        drain_until(rt, message.id, "dead")
    listed = cli.json("actors", TARGET, "Account", "--limit", "2")
    assert [a["actor_id"] for a in listed["items"]] == ["a", "b"]
    rest = cli.json("actors", TARGET, "Account", "--cursor", listed["next_cursor"])
    assert [a["actor_id"] for a in rest["items"]] == ["c"]
    assert "(more: solid-objects actors" in cli.ok("actors", TARGET, "Account", "--limit", "2")
    by_prefix = cli.json("actors", TARGET, "Account", "--id-prefix", "b", "--limit", "1")
    assert [a["actor_id"] for a in by_prefix["items"]] == ["b"]
    assert by_prefix["next_cursor"] is None
    assert cli.ok("actors", TARGET, "Account", "--id-prefix", "z").strip() == (
        "no Account actors with an id starting with 'z'"
    )

    # a preview by default: it shows the letter and writes nothing
    audit = count_rows(rt, "audit")
    preview = cli.ok("dead-letters", "discard", TARGET, dead[0].id)
    assert "would discard 1 dead letter(s)" in preview and "Account a" in preview
    assert "--execute" in preview
    shown = cli.json("dead-letters", "discard", TARGET, dead[0].id, dead[1].id)
    assert shown["dry_run"] is True
    assert [d["id"] for d in shown["items"]] == [dead[0].id, dead[1].id]
    assert count_rows(rt, "resolutions") == 0 and count_rows(rt, "audit") == audit
    assert len(cli.json("dead-letters", "list", TARGET)["items"]) == 3
    assert cli.ok("dead-letters", "discard", TARGET, dead[0].id, "--execute").strip() == (
        f"{dead[0].id}: discarded"
    )
    assert "already discarded" in cli.ok("dead-letters", "discard", TARGET, dead[0].id)
    # a discarded letter refuses a retry, and then nothing of the batch is retried
    stderr = cli.fails(1, "dead-letters", "retry", TARGET, dead[1].id, dead[0].id)
    assert "was discarded; it cannot be retried" in stderr
    assert count_rows(rt, "messages", "idempotency_key LIKE 'dead-letter:%'") == 0

    ids = "\n".join(m.id for m in dead[1:]) + "\n"
    done = cli.run("dead-letters", "retry", TARGET, "-", "--json", stdin=ids)
    assert done.returncode == 0, done.stderr
    assert [r["message_id"] for r in json.loads(done.stdout)] == [m.id for m in dead[1:]]
    assert count_rows(rt, "messages", "idempotency_key LIKE 'dead-letter:%'") == 2


def test_dead_effect_listed_and_retried(app: tuple[Runtime, CLI], tmp_path: Path) -> None:
    rt, cli = app
    (tmp_path / "outage").write_text("")  # the mail server is down
    message = rt.ref(Account, "e").deposit.send(amount=3)
    for _ in range(50):  # the handler fails twice (effect_max_attempts=2), then it is dead
        rt.testing.drain()
        if count_rows(rt, "effects", "status = 'dead'"):
            break
        rt.store.transact(lambda tx: tx.run("UPDATE solid_effects SET available_at = 0"))
    assert message.result() == 3
    (effect,) = cli.json("effects", "list", TARGET)["items"]
    assert (effect["name"], effect["attempts"]) == ("receipt", 2)
    assert effect["error"]["message"] == "mail server unreachable"
    assert "mail server unreachable" in cli.ok("effects", "list", TARGET)
    assert cli.json("status", TARGET)["total"]["effects_dead"] == 1

    (tmp_path / "outage").unlink()
    assert cli.ok("effects", "retry", TARGET, effect["id"]).strip() == (
        f"{effect['id']}: pending again"
    )
    assert cli.ok("effects", "retry", TARGET, effect["id"]).strip() == (
        f"{effect['id']}: already pending"
    )
    rt.testing.drain()
    assert count_rows(rt, "effects", f"id = '{effect['id']}' AND status = 'done'") == 1
    assert cli.fails(1, "effects", "retry", TARGET, effect["id"]).startswith(
        f"error: effect {effect['id']} is done"
    )


def test_operation_errors_exit_1(app: tuple[Runtime, CLI]) -> None:
    """Failures a user causes against a working database, with their messages."""
    rt, cli = app
    dead = rt.ref(Account, "x").deposit.send(amount=1, currency="XXX")
    drain_until(rt, dead.id, "dead")
    audit_before = count_rows(rt, "audit")
    unknown = "0" * 32
    me = cli_principal()
    cli.expect_all(
        [
            case(1, f"error: no message '{unknown}'", "dead-letters", "retry", TARGET, unknown),
            case(1, f"error: no message '{unknown}'", "dead-letters", "show", TARGET, unknown),
            case(1, "error: no message", "dead-letters", "discard", TARGET, dead.id, unknown),
            case(
                1,
                "error: no message",
                "dead-letters",
                "discard",
                TARGET,
                dead.id,
                unknown,
                "--execute",
            ),
            case(1, f"error: no effect '{unknown}'", "effects", "retry", TARGET, unknown),
            case(1, "error: no actor Account 'nobody'", "inspect", TARGET, "Account", "nobody"),
            # not authorized: no policy at all, or a read-only one
            case(
                1,
                f"error: not authorized: {me} may not status: no administration policy is "
                "installed, and the default denies everything",
                "status",
                TARGET,
                SOLID_ADMIN_APP_POLICY="none",
            ),
            case(
                1,
                f"error: not authorized: {me} may not dead_letters.retry",
                "dead-letters",
                "retry",
                TARGET,
                dead.id,
                SOLID_ADMIN_APP_POLICY="read",
            ),
            case(
                1,
                "runtime.admin.set_policy(allow(",
                "dead-letters",
                "discard",
                TARGET,
                dead.id,
                "--execute",
                SOLID_ADMIN_APP_POLICY="read",
            ),
        ]
    )
    assert cli.ok("status", TARGET, SOLID_ADMIN_APP_POLICY="read")  # reading is allowed
    # nothing was written by any of them
    assert count_rows(rt, "audit") == audit_before
    assert count_rows(rt, "resolutions") == 0
    assert count_rows(rt, "messages", "idempotency_key IS NOT NULL") == 0


def test_usage_and_loading_errors_exit_2(tmp_path: Path) -> None:
    """Errors found before any database work; and databases that cannot be used."""
    cli = CLI(f"sqlite:///{tmp_path / 'app.db'}", tmp_path)
    installed = Runtime(f"sqlite:///{tmp_path / 'app.db'}")  # so no case fails for lack of it
    installed.install()
    installed.close()
    cli.expect_all(
        [
            case(
                2,
                "expected MODULE:RUNTIME (e.g. myapp.actors:runtime), got 'nocolon'",
                "status",
                "nocolon",
            ),
            case(
                2,
                "cannot import module 'no_such_app.actors'",
                "status",
                "no_such_app.actors:runtime",
            ),
            case(
                2,
                "module 'tests.apps.admin_app' has no attribute 'nope'",
                "status",
                "tests.apps.admin_app:nope",
            ),
            case(
                2,
                "tests.apps.admin_app:VERSION is a str, not a Runtime",
                "status",
                "tests.apps.admin_app:VERSION",
            ),
            case(
                2,
                "ConfigurationError: not a database URL: 'not a url'",
                "status",
                TARGET,
                SOLID_ADMIN_APP_DB="not a url",
            ),
            case(
                2,
                "ConfigurationError: no driver for 'oracle'",
                "status",
                TARGET,
                SOLID_ADMIN_APP_DB="oracle://scott@localhost/db",
            ),
            case(
                2,
                "failed: ConfigurationError: not a database URL: ''",
                "status",
                TARGET,
                SOLID_ADMIN_APP_DB="",
            ),
            case(
                1,
                "error: database postgresql+psycopg://postgres@127.0.0.1:1/test: connection",
                "status",
                TARGET,
                SOLID_ADMIN_APP_DB="postgresql+psycopg://postgres@127.0.0.1:1/test",
            ),
            case(
                1,
                "unable to open database file",
                "dead-letters",
                "list",
                TARGET,
                SOLID_ADMIN_APP_DB="sqlite:////no/such/directory/app.db",
            ),
            case(
                1,
                "tables are not installed in this database: call runtime.install() or run "
                "`solid-objects install module:runtime`",
                "status",
                TARGET,
                SOLID_ADMIN_APP_DB=f"sqlite:///{tmp_path / 'empty.db'}",
            ),
            # bad arguments and options
            case(2, "Missing argument 'ID'", "inspect", TARGET, "Account"),
            case(2, "No such command 'frobnicate'", "dead-letters", "frobnicate", TARGET),
            case(2, "Missing argument", "dead-letters", "retry", TARGET),
            case(2, "no ids given", "dead-letters", "retry", TARGET, "-", stdin=""),
            case(2, "not a valid cursor: 'zz'", "dead-letters", "list", TARGET, "--cursor", "zz"),
            case(2, "0 is not in the range", "actors", TARGET, "Account", "--limit", "0"),
            case(2, "'closed' is not one of", "dead-letters", "list", TARGET, "--state", "closed"),
            case(2, "message id must not be empty", "dead-letters", "show", TARGET, ""),
        ]
    )
