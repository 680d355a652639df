"""A SIGTERM that reaches ``solid-objects worker`` before its loop runs stops it cleanly.

A supervisor may stop a worker while it is still importing the application (a rolling
deploy, a scale-down). The worker must exit 0 with its runtime closed, as it does for a
signal during ``run()``, not die by the signal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

SLOW_APP = '''
import os, pathlib, time
from solid_objects import Actor, Runtime

here = pathlib.Path(os.environ["SLOW_APP_DIR"])
(here / "importing").touch()
deadline = time.monotonic() + 60
while not (here / "go").exists() and time.monotonic() < deadline:
    time.sleep(0.05)

class SlowImportCounter(Actor):
    n: int = 0

    def add(self) -> int:
        self.n += 1
        return self.n

runtime = Runtime(os.environ["SLOW_APP_DB"], actors=[SlowImportCounter])
'''


def test_sigterm_while_the_application_imports_exits_0(tmp_path: Path) -> None:
    (tmp_path / "slow_import_app.py").write_text(SLOW_APP)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "src")]),
        "SLOW_APP_DIR": str(tmp_path),
        "SLOW_APP_DB": f"sqlite:///{tmp_path / 'app.db'}",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "solid_objects", "worker", "--install", "slow_import_app:runtime"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "importing").exists():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the worker never imported the application"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        (tmp_path / "go").touch()
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "stopped before the worker loop started" in stderr
