"""Logs, metrics and traces of what the actors do.

``observe(runtime, PrometheusMetrics(), OpenTelemetryTracing())`` sends the
engine's events to Prometheus metrics (``pip install solid-objects[metrics]``)
and OpenTelemetry spans (``solid-objects[otel]``) next to the structured logs
the runtime always writes. Without ``observe`` only the logs are written; the
optional packages are imported only when their class is used. See
``docs/observability.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .events import OUTCOMES, Fanout, Instrumentation, LogEvents, log_fields

if TYPE_CHECKING:
    from ..runtime import AsyncRuntime, Runtime
    from .otel import OpenTelemetryTracing
    from .prometheus import PrometheusMetrics

__all__ = [
    "OUTCOMES",
    "Instrumentation",
    "LogEvents",
    "OpenTelemetryTracing",
    "PrometheusMetrics",
    "log_fields",
    "observe",
]


def observe(runtime: Runtime | AsyncRuntime, *instrumentations: Instrumentation) -> None:
    """Send ``runtime``'s events to ``instrumentations``, besides its logs.

    Replaces what an earlier ``observe`` call installed. Call it before
    ``start()`` so no early event is missed; each instrumentation is bound to
    this runtime (a ``PrometheusMetrics`` registers its database gauges here).
    """
    from ..runtime import AsyncRuntime

    sync = runtime.sync if isinstance(runtime, AsyncRuntime) else runtime
    for instrumentation in instrumentations:
        instrumentation.bind(sync)
    combined = Fanout([LogEvents(sync.options), *instrumentations])
    sync.kernel.instrument(combined)


def __getattr__(name: str) -> Any:
    """Import the integrations lazily: their packages are optional."""
    extras = {
        "PrometheusMetrics": ("prometheus", "metrics"),
        "OpenTelemetryTracing": ("otel", "otel"),
    }
    if name not in extras:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, extra = extras[name]
    try:
        imported = importlib.import_module(f"{__name__}.{module}")
    except ImportError as exc:
        raise ImportError(
            f"{name} needs {exc.name or 'a missing package'}: pip install 'solid-objects[{extra}]'"
        ) from exc
    return getattr(imported, name)
