"""``solid-objects doctor`` on a locked SQLite database answers in its own bounded time
and reports the lock.

The test process holds the file's write lock (``BEGIN IMMEDIATE`` on its own
connection, as a stalled process would) while a real ``solid-objects doctor``
subprocess examines it. The old doctor's round trip waited for the lock in every
write (more than 15 s), let its ``CallTimeout`` escape, and then hung about 90 s
closing its probe runtime. The bound below is a guard against that hang, not a
latency check; the outcome checked is the report.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.apps.admin_app import build_runtime

ROOT = Path(__file__).resolve().parents[1]
TARGET = "tests.apps.admin_app:runtime"


@pytest.mark.timeout(200)
def test_doctor_on_a_locked_sqlite_database_reports_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    url = f"sqlite:///{path}"
    rt = build_runtime(url, workers=0)
    rt.install()
    rt.close()
    env = {
        **os.environ,
        "SOLID_ADMIN_APP_DB": url,
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
    }
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "solid_objects", "doctor", TARGET, "--json"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,  # the old doctor took well over 100 s here
        )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["write lock"]["status"] == "fail"
    assert "write lock" in checks["write lock"]["detail"]
    assert "round trip" not in checks  # not attempted against a lock it already found
    assert checks["connection"]["status"] == "ok"  # reads still work under WAL

    # Once the lock is gone the same doctor finds nothing wrong with the database.
    again = subprocess.run(
        [sys.executable, "-m", "solid_objects", "doctor", TARGET, "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    checks = {c["name"]: c for c in json.loads(again.stdout)["checks"]}
    assert "write lock" not in checks
    assert checks["round trip"]["status"] == "ok"
