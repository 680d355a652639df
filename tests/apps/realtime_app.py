"""A realtime endpoint with a tiny send queue, served by uvicorn in its own process.

    SOLID_REALTIME_DB=sqlite:///... uvicorn --factory tests.apps.realtime_app:build --port PORT

The actor's observed value is large, so a client that stops reading fills the TCP
buffers, then the queue, within a few dozen commits (``tests/test_realtime_process``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.routing import Mount

from solid_objects import Actor, Runtime
from solid_objects.web import realtime

#: Frames that may wait for one client before it is dropped.
QUEUE = 4


class FloodBlob(Actor):
    blob: str = ""
    version: int = 0

    observables = {"blob": "value", "version": "value"}

    def grow(self, size: int) -> int:
        self.version += 1
        self.blob = str(self.version % 10) * size
        return self.version


def build() -> Starlette:
    """The app (``uvicorn --factory tests.apps.realtime_app:build``)."""
    runtime = Runtime(
        os.environ["SOLID_REALTIME_DB"],
        workers=0,
        actors=[FloodBlob],
        authorize_subscription=lambda request: True,
    )
    runtime.install()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        runtime.start()
        try:
            yield
        finally:
            runtime.close()

    return Starlette(
        routes=[Mount("/live", realtime(runtime, context=lambda ws: None, queue_size=QUEUE))],
        lifespan=lifespan,
    )
