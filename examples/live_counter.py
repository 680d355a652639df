"""A shared counter every open browser sees change live: ``realtime(runtime, context=...)``.

Run it, then open http://127.0.0.1:8000/ in two browsers and press the button::

    python -m examples.live_counter --port 8000

``#value`` shows the counter actor's *committed* value: the button only posts the
increment; the number changes when the commit reaches every page through the
realtime endpoint mounted at ``/live``. ``?user=NAME`` picks who you are (a real
application resolves the user from its session instead): ``#mine`` shows a
personalized payload, your own clicks, computed for you alone. ``?counter=ID``
follows another counter; ids starting with ``private-`` are refused to everyone,
whether they exist or not, on every path: the socket, ``GET /fragment``,
``POST /increment`` and ``POST /reset`` ask the same policies (403). ``POST /reset``
destroys the counter (it comes back, as a new incarnation, at the next increment).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import quote

from solid_objects.extras import requires_extra

with requires_extra("web", "examples.live_counter"):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
    from starlette.routing import Mount, Route
    from starlette.websockets import WebSocket

from solid_objects import Actor, AuthorizationRequest, Runtime, Unauthorized, payload
from solid_objects.web import realtime

#: The package's vendored htmx (the dashboard's copy).
HTMX = Path(str(files("solid_objects.web") / "static" / "htmx.min.js"))


class LiveCounter(Actor):
    value: int = 0
    clicks: dict[str, int] = {}

    #: Every subscriber sees the value; the clicks per user only as each one's payload.
    observables = {"value": "value"}

    def increment(self, user: str) -> int:
        self.value += 1
        self.clicks = {**self.clicks, user: self.clicks.get(user, 0) + 1}
        return self.value

    @payload
    def mine(self, context: Any) -> dict[str, Any]:
        return {"user": context, "clicks": self.clicks.get(str(context), 0)}


def public(request: AuthorizationRequest) -> bool:
    """Never a ``private-`` counter (existing or not), whoever asks and however."""
    return not request.actor_id.startswith("private-")


def may_subscribe(request: AuthorizationRequest) -> bool:
    """Named users, on public counters."""
    return isinstance(request.context, str) and public(request)


def may_query(request: AuthorizationRequest) -> bool:
    """Reads of public counters, except the ``mine`` payload for the anonymous guest."""
    return public(request) and (
        request.operation != "mine" or request.context not in (None, "guest")
    )


def may_change(request: AuthorizationRequest) -> bool:
    """Increments and resets of public counters, by anyone (the demo has no login)."""
    return public(request)


PAGE = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Live counter</title></head>
<body>
<h1>Counter <code id="counter">{counter}</code></h1>
<p>Value: <output id="value">…</output></p>
<p><button id="increment" type="button">Increment</button></p>
<p>You (<span id="user">{user}</span>): <output id="mine">…</output></p>
<p>Status: <span id="status">connecting</span>, revision <span id="revision">-</span></p>
<p>Refreshed by htmx: <span id="fragment" hx-get="/fragment?counter={counter_q}"
   hx-trigger="load, solid:changed">…</span></p>
<script src="/htmx.min.js"></script>
<script type="module">
import {{ RealtimeClient, endpointUrl, htmxRefresh }} from "/live/client.js";
const config = {config};
const client = new RealtimeClient(
  endpointUrl("/live") + "?user=" + encodeURIComponent(config.user),
  {{
    initialDelay: 100,
    maxDelay: 1000,
    onStatus: (s) => {{
      if (s !== "connected") document.querySelector("#status").textContent = s;
    }},
  }},
);
window.solidClient = client;
window.solidLog = [];  // every value shown, in order (the tests read it)
const sub = client.subscribe(
  {{ actorType: "LiveCounter", actorId: config.counter, payloads: ["mine"] }},
  {{
    onUpdate: (view) => {{
      window.solidLog.push([view.incarnation, view.revision, view.values.value ?? 0]);
      document.querySelector("#value").textContent = String(view.values.value ?? 0);
      document.querySelector("#revision").textContent = view.incarnation + "." + view.revision;
      document.querySelector("#status").textContent = "live";
    }},
    onPayload: (name, data) => {{
      document.querySelector("#mine").textContent = data.clicks + " clicks";
    }},
    onError: (error) => {{
      document.querySelector("#status").textContent = "error: " + error.code;
    }},
  }},
);
window.solidSubscription = sub;
htmxRefresh(sub, "#fragment", {{ observes: ["value"] }});
document.querySelector("#increment").addEventListener("click", () => {{
  fetch("/increment?" + new URLSearchParams(config), {{ method: "POST" }});
}});
</script>
</body>
</html>
"""


def build(database: str, *, lease_duration: float = 30.0) -> Starlette:
    """The example's ASGI app over ``database`` (its runtime runs in the app's lifespan)."""
    runtime = Runtime(
        database,
        lease_duration=lease_duration,
        actors=[LiveCounter],
        authorize_subscription=may_subscribe,
        authorize_query=may_query,
        authorize_message=may_change,
        authorize_destroy=may_change,
    )
    runtime.install()

    def who(websocket: WebSocket) -> str | None:
        return websocket.query_params.get("user")

    def target(request: Request) -> tuple[str, str]:
        return request.query_params.get("counter", "shared"), request.query_params.get(
            "user", "guest"
        )

    async def page(request: Request) -> HTMLResponse:
        counter, user = target(request)
        config = json.dumps({"counter": counter, "user": user}).replace("<", "\\u003c")
        return HTMLResponse(
            PAGE.format(
                counter=html.escape(counter),
                counter_q=html.escape(quote(counter, safe="")),
                user=html.escape(user),
                config=config,
            )
        )

    def counter_of(request: Request) -> Any:
        """The counter the request names, every call authorized as its user."""
        counter, user = target(request)
        return runtime.ref(LiveCounter, counter).with_options(authorization=user), user

    async def fragment(request: Request) -> Response:
        """What an htmx fragment refetches when the counter changed: committed state."""
        ref, _ = counter_of(request)
        try:
            state = await _threaded(ref.snapshot)
        except Unauthorized:
            return HTMLResponse("refused", status_code=403)
        return HTMLResponse(f'<output id="fragment-value">{int(state["value"])}</output>')

    async def htmx_js(request: Request) -> FileResponse:
        return FileResponse(HTMX, media_type="text/javascript")

    async def increment(request: Request) -> JSONResponse:
        ref, user = counter_of(request)
        try:
            value = await _threaded(lambda: ref.increment(user=user))
        except Unauthorized:
            return JSONResponse({"error": "refused"}, status_code=403)
        return JSONResponse({"value": value})

    async def reset(request: Request) -> Response:
        ref, _ = counter_of(request)
        try:
            await _threaded(ref.destroy)
        except Unauthorized:
            return JSONResponse({"error": "refused"}, status_code=403)
        return Response(status_code=204)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        runtime.start()
        try:
            yield
        finally:
            runtime.close()

    return Starlette(
        routes=[
            Route("/", page),
            Route("/fragment", fragment),
            Route("/htmx.min.js", htmx_js),
            Route("/increment", increment, methods=["POST"]),
            Route("/reset", reset, methods=["POST"]),
            Mount("/live", realtime(runtime, context=who, poll_interval=0.5)),
        ],
        lifespan=lifespan,
    )


async def _threaded(fn: Any) -> Any:
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(fn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--database",
        default=os.environ.get("LIVE_COUNTER_DATABASE"),
        help="database URL (default: a SQLite file in the temporary directory)",
    )
    parser.add_argument(
        "--lease-duration",
        type=float,
        default=30.0,
        help="seconds a killed server's actors stay leased before another process may run them",
    )
    args = parser.parse_args()
    database = args.database or f"sqlite:///{Path(tempfile.gettempdir()) / 'live_counter.db'}"
    import uvicorn

    app = build(database, lease_duration=args.lease_duration)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
