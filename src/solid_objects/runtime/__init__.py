"""``Runtime`` and ``AsyncRuntime``: configuration, lifecycle and references.

The two faces of one engine, with the same names: ``sync_face.py`` holds
:class:`Runtime` (for threads), ``async_face.py`` holds :class:`AsyncRuntime` (the
same names as coroutines, wrapping a ``Runtime``).
"""

from .async_face import AsyncRuntime
from .sync_face import Runtime

__all__ = ["AsyncRuntime", "Runtime"]
