"""The operations test application (``admin_app``) with the dashboard's principal granted.

    solid-objects dashboard tests.apps.dashboard_app:runtime

Same environment variables as :mod:`tests.apps.admin_app`; ``dashboard:local`` may
do everything, as ``docs/dashboard.md`` tells an application to grant it.
"""

from __future__ import annotations

import os
from typing import Any

from solid_objects import Runtime
from solid_objects.admin import allow

from .admin_app import build_runtime

_runtime: Runtime | None = None


def __getattr__(name: str) -> Any:
    global _runtime
    if name == "runtime":
        if _runtime is None:
            _runtime = build_runtime(os.environ["SOLID_ADMIN_APP_DB"], workers=0)
            _runtime.admin.set_policy(allow({"dashboard:local": "*"}))
        return _runtime
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
