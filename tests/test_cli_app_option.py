"""The command line as a user first meets it, in real subprocesses: ``--version``,
``-h``, the runtime named once (``-A``/``--app``, ``SOLID_OBJECTS_APP``) instead of on
every command, the Django doctor's advice in ``manage.py`` form, and audit records
whose times read as ISO 8601 like the rest.

The application is ``tests/apps/admin_app.py``, as in ``test_cli.py``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from solid_objects import Runtime
from tests.apps.admin_app import Account, build_runtime

from .conftest import count_rows
from .test_cli import CLI, case
from .test_processes import STEP, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[1]
TARGET = "tests.apps.admin_app:runtime"
ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
HOW = "with solid-objects -A MODULE:RUNTIME before the command, or in the SOLID_OBJECTS_APP"


@pytest.fixture
def cli(tmp_path: Path) -> CLI:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    installed = Runtime(url)
    installed.install()
    installed.close()
    made = CLI(url, tmp_path)
    made.env.pop("SOLID_OBJECTS_APP", None)
    return made


def test_version_and_short_help(cli: CLI) -> None:
    assert cli.ok("--version") == "solid-objects, version 0.1.0\n"
    top = cli.ok("-h")
    assert top == cli.ok("--help")
    assert "-A, --app MODULE:RUNTIME" in top
    assert "[env var: SOLID_OBJECTS_APP]" in top
    assert "solid-objects -A myapp.actors:runtime status" in " ".join(top.split())
    # -h on a command and a subcommand, with no runtime named anywhere
    assert cli.ok("inspect", "-h").startswith("Usage: python -m solid_objects inspect [OPTIONS]")
    retry = cli.ok("dead-letters", "retry", "-h")
    assert retry.startswith("Usage: python -m solid_objects dead-letters retry [OPTIONS]")


def test_the_runtime_from_the_argument_the_option_or_the_environment(cli: CLI) -> None:
    def status(*args: str, **env: str) -> dict[str, object]:
        shown: dict[str, object] = cli.json(*args, **env)
        shown.pop("now")  # the database clock when it ran
        return shown

    positional = status("status", TARGET)
    assert status("-A", TARGET, "status") == positional
    assert status(f"--app={TARGET}", "status") == positional
    assert status("status", SOLID_OBJECTS_APP=TARGET) == positional
    # the argument wins over the environment and the option
    assert status("-A", "nowhere:runtime", "status", TARGET) == positional
    assert status("status", TARGET, SOLID_OBJECTS_APP="nowhere:runtime") == positional
    # the option wins over the environment
    assert status("-A", TARGET, "status", SOLID_OBJECTS_APP="nowhere:runtime") == positional


def test_commands_with_more_arguments_take_the_runtime_from_the_option(
    cli: CLI, tmp_path: Path
) -> None:
    rt = build_runtime(cli.env["SOLID_ADMIN_APP_DB"], workers=1)
    with rt:
        assert rt.ref(Account, "acc-1").deposit(amount=5) == 5
    shown = cli.json("-A", TARGET, "inspect", "Account", "acc-1")
    positional = cli.json("inspect", TARGET, "Account", "acc-1")
    assert shown.pop("now") and positional.pop("now")
    assert shown == positional
    assert shown["state"]["balance"] == 5
    listed = cli.json("actors", "Account", "--limit", "5", SOLID_OBJECTS_APP=TARGET)
    assert [a["actor_id"] for a in listed["items"]] == ["acc-1"]
    # an id the runtime does not know: the command ran against it (exit 1, not usage)
    missing = "0" * 32
    gone = f"no message '{missing}'"
    assert gone in cli.fails(1, "dead-letters", "show", missing, SOLID_OBJECTS_APP=TARGET)
    assert gone in cli.fails(1, "-A", TARGET, "dead-letters", "retry", missing)


def test_no_runtime_anywhere_is_a_usage_error_that_names_the_three_ways(cli: CLI) -> None:
    cli.expect_all(
        [
            case(2, "missing MODULE:RUNTIME, the runtime to act on", "status"),
            case(2, HOW, "status"),
            case(2, HOW, "worker"),
            case(
                2,
                "expected MODULE:RUNTIME (e.g. myapp.actors:runtime), got 'Account'",
                "inspect",
                "Account",
                "acc-1",
            ),
            case(2, HOW, "dead-letters", "retry", "0" * 32),
            case(
                2,
                "expected MODULE:RUNTIME (e.g. myapp.actors:runtime), got 'nocolon'",
                "status",
                "nocolon",
            ),
            # a runtime the option names is loaded as an argument would be
            case(2, "cannot import module 'nowhere'", "-A", "nowhere:runtime", "status"),
            case(2, "cannot import module 'nowhere'", "status", SOLID_OBJECTS_APP="nowhere:rt"),
            # the option belongs before the command, as Celery's -A
            case(2, "-A/--app goes before the command: solid-objects -A", "status", "-A", TARGET),
        ]
    )


def test_prune_and_expire_audit_records_read_times_as_iso_8601(db_url: str, tmp_path: Path) -> None:
    options = {"state_ttl": {"Account": 0.05}, "retention_by_type": {"Account": 0.001}}
    cli = CLI(db_url, tmp_path)
    cli.env["SOLID_ADMIN_APP_OPTIONS"] = json.dumps(options)
    rt = build_runtime(db_url, workers=1, **options)
    rt.install()
    with rt:
        rt.ref(Account, "old").deposit(amount=1)
        # its receipt effect done: an actor with pending effects is not idle
        wait_until(lambda: count_rows(rt, "effects", "status = 'done'"), STEP, "the receipt")
    time.sleep(0.2)  # longer than the state_ttl and the retention
    cli.ok("-A", TARGET, "prune", "--older-than", "0s", "--execute")
    assert "Account: deleted 1" in cli.ok("expire", "--execute", SOLID_OBJECTS_APP=TARGET)
    records = cli.json("audit", TARGET)["items"]
    pruned = [r for r in records if r["action"] == "retention.prune"]
    expired = [r for r in records if r["action"] == "actors.expire"]
    assert pruned and expired, records
    for record in pruned:
        assert ISO_UTC.fullmatch(record["detail"]["cutoff"]), record
        assert record["detail"]["cutoff"] <= record["at"], record
        if "cutoff_by_type" in record["detail"]:
            assert ISO_UTC.fullmatch(record["detail"]["cutoff_by_type"]["Account"]), record
    assert any("cutoff_by_type" in r["detail"] for r in pruned), pruned
    (record,) = expired
    assert ISO_UTC.fullmatch(record["detail"]["untouched_before"]), record
    assert record["detail"]["untouched_before"] <= record["at"], record


def test_the_django_doctor_advises_manage_py_commands(tmp_path: Path) -> None:
    from solid_objects.contrib.django.management.commands.solid_objects import TARGET as DJANGO
    from solid_objects.doctor import DJANGO_APP

    assert DJANGO_APP == DJANGO
    project = ROOT / "tests" / "apps" / "djangoproject"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(project)]),
        "SHOP_DIR": str(tmp_path),
        "SHOP_DATABASE": "sqlite",
    }

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert manage("migrate", "--noinput").returncode == 0
    done = manage("solid_objects", "doctor", "--no-round-trip")
    text = done.stdout + done.stderr
    assert "python manage.py solid_objects worker" in text, text
    assert "solid-objects worker" not in text, text
    assert "solid_objects.contrib.django:runtime" not in text, text
