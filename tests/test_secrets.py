"""Credentials never leave the process: every URL shown or logged is masked, and the
health endpoint listens on the loopback interface unless told otherwise.

The doctor runs as a real ``solid-objects doctor`` subprocess against a URL that carries
passwords in every form the drivers accept; the health endpoint is a real HTTP server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from solid_objects import Runtime
from solid_objects.doctor import serve_health
from solid_objects.errors import ConfigurationError
from solid_objects.redaction import MASK, redact_url

ROOT = Path(__file__).resolve().parents[1]
TARGET = "tests.apps.admin_app:runtime"
SECRET = "hunter2"


def with_query_secrets(url: str) -> str:
    """``url`` with a password in each query parameter the drivers read one from."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}password={SECRET}&sslpassword={SECRET}x&passwd={SECRET}y"


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql+psycopg://app:{SECRET}@db:5432/app?sslmode=require",
        f"postgresql+psycopg://app@db/app?password={SECRET}&sslpassword={SECRET}",
        f"mysql+pymysql://root@db/app?passwd={SECRET}&charset=utf8mb4",
        f"mysql+pymysql://root:{SECRET}@db/app?ssl_key_password={SECRET}",
        f"redis://:{SECRET}@cache:6379/0",
        f"rediss://cache/0?password={SECRET}&client_secret={SECRET}&token={SECRET}",
        f"sqlite:///app.db?password={SECRET}",
        f"postgresql://app:{SECRET}@h1,h2/app#{SECRET}",
        f"not a url, password={SECRET}",
    ],
)
def test_every_credential_form_is_masked(url: str) -> None:
    shown = redact_url(url)
    assert SECRET not in shown and MASK in shown


def test_masking_keeps_what_an_operator_needs() -> None:
    assert redact_url("sqlite:////var/lib/app.db") == "sqlite:////var/lib/app.db"
    shown = redact_url(make_url(f"postgresql+psycopg://app:{SECRET}@db:5432/app?sslmode=require"))
    assert shown == "postgresql+psycopg://app:***@db:5432/app?sslmode=require"


def test_configuration_errors_do_not_echo_the_password() -> None:
    with pytest.raises(ConfigurationError) as raised:
        Runtime("sqlite:///x.db", wakeup_url=f"http://u:{SECRET}@cache/?token={SECRET}")
    assert SECRET not in str(raised.value)


def test_doctor_output_masks_query_string_passwords(db_url: str, tmp_path: Path) -> None:
    """The old doctor masked only the userinfo: ``?password=`` was printed verbatim."""
    setup = Runtime(db_url)
    setup.install()
    setup.close()
    env = {
        **os.environ,
        "SOLID_ADMIN_APP_DB": with_query_secrets(db_url),
        "SOLID_ADMIN_APP_OPTIONS": json.dumps({"wakeup_url": f"redis://:{SECRET}@127.0.0.1:1/0"}),
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
    }
    for args in (["doctor", TARGET, "--no-round-trip"], ["doctor", TARGET, "--json"]):
        done = subprocess.run(
            [sys.executable, "-m", "solid_objects", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "connection" in done.stdout, done.stderr
        assert SECRET not in done.stdout + done.stderr
        assert "password=***" in done.stdout


def test_health_endpoint_masks_and_listens_on_loopback(db_url: str) -> None:
    rt = Runtime(with_query_secrets(db_url), workers=0)
    server = serve_health(rt, 0)
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as r:
                body = r.read().decode()
        except urllib.error.HTTPError as failed:  # 503 when the server refuses the password
            body = failed.read().decode()
        assert "connection" in body and SECRET not in body
    finally:
        server.shutdown()
        server.server_close()
        rt.close()


def worker_health_banner(db_url: str, *extra: str) -> str:
    """Start a real ``solid-objects worker --health-port``; return where it says it listens."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = {
        **os.environ,
        "SOLID_ADMIN_APP_DB": db_url,
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
    }
    args = ["worker", TARGET, "--health-port", str(port), *extra]
    proc = subprocess.Popen(
        [sys.executable, "-m", "solid_objects", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        for line in proc.stderr:
            if line.startswith("health check on "):
                # A "worker loop" check means run() started, its SIGTERM handler set.
                while True:
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz") as r:
                            body = r.read().decode()
                    except urllib.error.HTTPError as failed:
                        body = failed.read().decode()
                    assert SECRET not in body
                    if "worker loop" in body:
                        break
                    assert time.monotonic() < deadline, "the worker loop never started"
                    time.sleep(0.1)
                return line.split()[-1].replace(str(port), "PORT")
            assert time.monotonic() < deadline, "the worker never served its health endpoint"
        raise AssertionError(f"the worker exited {proc.wait()} before serving")
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0


def test_worker_health_endpoint_binds_loopback_unless_a_host_is_given(db_url: str) -> None:
    setup = Runtime(db_url)
    setup.install()
    setup.close()
    assert worker_health_banner(db_url) == "http://127.0.0.1:PORT/healthz"
    assert worker_health_banner(db_url, "--health-host", "0.0.0.0") == (
        "http://0.0.0.0:PORT/healthz"
    )
