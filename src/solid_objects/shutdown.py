"""Give leases back when the interpreter exits without ``close()``.

Without this, a process that returns from ``main`` with a started runtime, or is
sent SIGTERM, would leave its leases to expire: the next process's call to one of
its actors would wait a whole ``lease_duration``. Started runtimes are kept here
until they stop; at interpreter exit (``atexit``) each still running one is
stopped, which finishes in-flight turns and releases its leases.

SIGTERM's default action ends the process without running ``atexit``. When a
runtime is started from the main thread and SIGTERM still has its default
action, this installs a handler that turns SIGTERM into ``SystemExit(143)``
(128 + 15, what a shell reports for SIGTERM) while a runtime runs, so
``with runtime:`` blocks, ``finally`` clauses and ``atexit`` run. A handler the
application (or its server: uvicorn, gunicorn) installed is left alone, and
with no runtime running the handler does what the default would. SIGINT needs
nothing: its default raises ``KeyboardInterrupt``, which unwinds to ``atexit``.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
from types import FrameType
from typing import Protocol

log = logging.getLogger("solid_objects.runtime")


class Stoppable(Protocol):
    def stop(self, timeout: float = 30.0) -> None: ...


_lock = threading.Lock()
_running: list[Stoppable] = []
_registered = False


def watch(runtime: Stoppable) -> None:
    """``runtime`` was started: stop it at interpreter exit unless it stops first."""
    global _registered
    with _lock:
        if not any(r is runtime for r in _running):
            _running.append(runtime)
        if not _registered:
            atexit.register(_at_exit)
            _registered = True
    if threading.current_thread() is threading.main_thread():
        guard_sigterm()


def unwatch(runtime: Stoppable) -> None:
    """``runtime`` stopped: nothing to do for it at exit."""
    with _lock:
        _running[:] = [r for r in _running if r is not runtime]


def guard_sigterm() -> None:
    """From the main thread: make SIGTERM unwind (see the module docstring)."""
    try:
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread of the main interpreter
        pass


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    with _lock:
        running = bool(_running)
    if running:
        raise SystemExit(128 + signum)
    # No runtime to stop: behave as the default action would.
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _at_exit() -> None:
    with _lock:
        running = list(reversed(_running))
    for runtime in running:
        try:
            runtime.stop()
        except Exception:
            log.exception("could not release the leases of a runtime at exit; they expire")
