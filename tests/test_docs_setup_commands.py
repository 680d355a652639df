"""The setup commands docs/frameworks.md shows, run on the files it shows.

``makemigrations djshop`` before ``migrate`` creates the example app's tables, and
``solid-objects install`` before the Flask worker lets a worker started before any
web request run instead of stopping at once.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from .test_docs import ROOT, python_blocks

PAGE = ROOT / "docs" / "frameworks.md"


def write_files(folder: Path) -> dict[str, str]:
    """Write the page's file blocks into ``folder``; the environment to run them in."""
    for block in python_blocks(PAGE):
        if block.file is not None:
            target = folder / block.file
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code + "\n", encoding="utf-8")
    path = os.pathsep.join([str(folder), str(ROOT / "src")])
    return {**os.environ, "PYTHONPATH": path, "SOLID_WORKERS": "1"}


def run(folder: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=120
    )


def tables(database: Path) -> set[str]:
    with sqlite3.connect(database) as db:
        return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def test_makemigrations_then_migrate_creates_the_example_apps_tables(tmp_path: Path) -> None:
    env = write_files(tmp_path)
    django = ("-m", "django")
    settings = "--settings=djsite.settings"
    skipped = run(tmp_path, env, *django, "migrate", "--noinput", settings)
    assert skipped.returncode == 0, skipped.stderr
    assert "djshop_order" not in tables(tmp_path / "db.sqlite3")  # the step the page adds
    made = run(tmp_path, env, *django, "makemigrations", "djshop", settings)
    assert made.returncode == 0, made.stderr
    migrated = run(tmp_path, env, *django, "migrate", "--noinput", settings)
    assert migrated.returncode == 0, migrated.stderr
    assert {"djshop_order", "djshop_customer", "solid_messages"} <= tables(
        tmp_path / "db.sqlite3"
    )


def worker_stays_up(folder: Path, env: dict[str, str]) -> tuple[bool, str]:
    """Start the page's Flask worker command; whether it is still running after 3 s."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "solid_objects", "worker", "flaskshop:solid.runtime"],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    time.sleep(3)
    alive = worker.poll() is None
    if alive:
        os.killpg(worker.pid, signal.SIGTERM)
    _, stderr = worker.communicate(timeout=60)
    return alive, stderr


def test_the_flask_worker_runs_after_the_install_step(tmp_path: Path) -> None:
    env = write_files(tmp_path)
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'production.db'}"
    alive, stderr = worker_stays_up(tmp_path, env)
    assert not alive and "install" in stderr  # without the step: it stops at once
    installed = run(tmp_path, env, "-m", "solid_objects", "install", "flaskshop:solid.runtime")
    assert installed.returncode == 0, installed.stderr
    alive, stderr = worker_stays_up(tmp_path, env)
    assert alive, stderr
