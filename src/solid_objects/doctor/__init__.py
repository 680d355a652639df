"""The doctor and the health check: is this deployment able to run calls, and if not, why.

:func:`examine` (``solid-objects doctor``) checks, in order: the connection, the
schema, the database's settings, the clock, the worker processes, the wake-up
path, the backlog, and finally a real round trip through a throwaway actor
type that only the doctor's own runtime runs (``processes.py``). Each
:class:`Check` says what was found and, when something is wrong, what to do
about it. :func:`health` (``health.py``) is the cheap version for probes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .database import (
    LOCK_WAIT_S,
    check_clock,
    check_connection,
    check_connections,
    check_schema,
    check_settings,
    check_write_lock,
)
from .health import health, serve_health
from .policies import check_authorization
from .processes import (
    SolidObjectsDoctorProbe,
    check_backlog,
    check_effect_limits,
    check_round_trip,
    check_wakeup,
    check_workers,
)
from .report import DJANGO_APP, Check, Report, Status, for_app

if TYPE_CHECKING:
    from ..runtime import Runtime


def examine(
    runtime: Runtime, *, round_trip: bool = True, timeout: float = 10.0, app: str = "APP"
) -> Report:
    """Run every check against ``runtime``'s database; never raises for what it finds.

    ``app`` is how the advice names the application (the CLI's ``module:runtime``).
    """
    checks: list[Check] = []
    connected = check_connection(runtime, checks)
    if connected and check_schema(runtime, checks):
        check_settings(runtime, checks)
        check_clock(runtime, checks)
        check_workers(runtime, checks)
        check_wakeup(runtime, checks)
        check_connections(runtime, checks)
        check_backlog(runtime, checks)
        check_effect_limits(runtime, checks)
        if round_trip and check_write_lock(runtime, checks, min(timeout, LOCK_WAIT_S)):
            check_round_trip(runtime, checks, timeout)
    check_authorization(runtime, checks)
    return Report([for_app(c, app) for c in checks])


__all__ = [
    "DJANGO_APP",
    "Check",
    "Report",
    "SolidObjectsDoctorProbe",
    "Status",
    "examine",
    "health",
    "serve_health",
]
