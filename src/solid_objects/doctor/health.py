""":func:`health` (``runtime.health()``, the worker's ``--health-port``) is the cheap
version of the doctor for probes: the database answers, the schema is current, and
this process's worker loop is alive and has heartbeated recently."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from .database import check_connection, check_schema
from .report import Check, Report, for_app

if TYPE_CHECKING:
    from ..runtime import Runtime

log = logging.getLogger("solid_objects.doctor")


def health(runtime: Runtime) -> Report:
    """Cheap checks for a liveness or readiness probe of a process running ``runtime``."""
    checks: list[Check] = []
    if not (check_connection(runtime, checks) and check_schema(runtime, checks)):
        return Report([for_app(c, "APP") for c in checks])
    if runtime.kernel.running:
        alive, silent = runtime.kernel.worker_loop()
        limit = 2 * runtime.options.lease_duration
        if not alive:
            checks.append(Check("worker loop", "fail", "the poller thread is not running"))
        elif silent > limit:
            checks.append(
                Check(
                    "worker loop",
                    "fail",
                    f"no heartbeat committed for {silent:.1f}s (limit {limit:g}s)",
                    "the database may be refusing writes; see the process's log",
                )
            )
        else:
            checks.append(Check("worker loop", "ok", f"last heartbeat {silent:.1f}s ago"))
    return Report(checks)


def serve_health(runtime: Runtime, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Answer ``GET /healthz`` (and ``/readyz``) with the health report: 200 or 503, JSON.

    The endpoint has no authentication, so it listens on the loopback interface unless
    the caller names another ``host`` (a Kubernetes probe needs ``0.0.0.0``).

    For Kubernetes probes of a worker process (``solid-objects worker --health-port``);
    the server runs in a daemon thread until ``server.shutdown()``.
    """
    from ..admin import to_jsonable

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/healthz", "/readyz", "/"):
                self.send_error(404)
                return
            try:
                report = health(runtime)
                body = {"status": report.status, "checks": to_jsonable(report.checks)}
                code = 200 if report.ok else 503
            except Exception as exc:  # a probe must answer, whatever went wrong
                body, code = {"status": "fail", "error": repr(exc)}, 503
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("health %s", format % args)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="solid-health", daemon=True).start()
    return server
