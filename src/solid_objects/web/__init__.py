"""The operator dashboard (the ``[web]`` extra): ``dashboard(runtime, principal=...)``.

Mount it in any ASGI application, or serve it alone with ``solid-objects dashboard``.
"""

from .dashboard import dashboard

__all__ = ["dashboard"]
