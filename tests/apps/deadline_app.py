"""A FastAPI app whose handlers call with a short timeout, served by uvicorn in its own
process (``tests/test_call_deadlines``).

    SOLID_DEADLINE_DB=sqlite:///... uvicorn --factory tests.apps.deadline_app:build --port PORT

``/slots/{id}/take`` makes the actor warm here (held idle by this process);
``/slots/{id}/nap`` (an ``async def`` handler) and ``/slots/{id}/nap-sync`` (a ``def``
handler, run in a thread) then call ``nap(1.5)`` with ``timeout=0.2``: an operation
this process has not timed yet.
"""

from __future__ import annotations

import os
import time

from fastapi import FastAPI

from solid_objects import Actor, AsyncRuntime
from solid_objects.contrib import fastapi as solid

TIMEOUT = 0.2
NAP = 1.5


class Sleeper(Actor):
    n: int = 0

    def take(self) -> int:
        self.n += 1
        return self.n

    def nap(self, seconds: float) -> int:
        time.sleep(seconds)
        self.n += 1
        return self.n


def build() -> FastAPI:
    """The app (``uvicorn --factory tests.apps.deadline_app:build``)."""
    runtime = AsyncRuntime(os.environ["SOLID_DEADLINE_DB"], workers=2, poll_interval=0.05)
    app = FastAPI(lifespan=solid.lifespan(runtime), exception_handlers=solid.exception_handlers())

    @app.get("/live")
    async def live() -> str:
        return "ok"

    @app.post("/slots/{slot_id}/take")
    async def take(slot_id: str) -> int:
        return await runtime.ref(Sleeper, slot_id).take()

    @app.post("/slots/{slot_id}/nap")
    async def nap(slot_id: str) -> int:
        return await runtime.ref(Sleeper, slot_id).with_options(timeout=TIMEOUT).nap(seconds=NAP)

    @app.post("/slots/{slot_id}/nap-sync")
    def nap_sync(slot_id: str) -> int:
        slot = runtime.sync.ref(Sleeper, slot_id).with_options(timeout=TIMEOUT)
        return slot.nap(seconds=NAP)

    return app
