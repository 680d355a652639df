"""The web parts (the ``[web]`` extra): the operator dashboard,
``dashboard(runtime, principal=...)``, and the realtime endpoint,
``realtime(runtime, context=...)``.

Mount either in any ASGI application; serve the dashboard alone with
``solid-objects dashboard``.
"""

from .dashboard import dashboard
from .realtime import realtime

__all__ = ["dashboard", "realtime"]
