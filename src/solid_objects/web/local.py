"""The dashboard served alone (``solid-objects dashboard``): one random access token.

As Jupyter does, the URL printed at start carries ``?token=...``; opening it sets
the token as an HttpOnly, SameSite=Strict cookie and redirects to the same page
without it (so the token leaves the address bar and the history). Whoever holds
the cookie acts as the principal ``dashboard:local``, which the application grants
like any other: ``runtime.admin.set_policy(allow({"dashboard:local": "*"}))``.
"""

from __future__ import annotations

import hmac
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, quote, urlencode

from ..extras import requires_extra

with requires_extra("web", "solid_objects.web.local"):
    import uvicorn
    from starlette.requests import Request

from .dashboard import dashboard
from .security import ASGIApp, Receive, Scope, Send

if TYPE_CHECKING:
    from ..runtime import Runtime

#: Who the token's holder is, to the administration policy.
LOCAL_PRINCIPAL = "dashboard:local"
COOKIE = "solid_dashboard_token"


def _same(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


class TokenGate:
    """ASGI wrapper: trade a valid ``?token=`` for the cookie, then redirect without it."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
            given = [v for k, v in query if k == "token"]
            if given and _same(given[0], self.token):
                rest = urlencode([(k, v) for k, v in query if k != "token"])
                path = quote(scope.get("root_path", "") + scope["path"])
                location = path + ("?" + rest if rest else "")
                cookie = f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
                await send(
                    {
                        "type": "http.response.start",
                        "status": 303,
                        "headers": [
                            (b"location", location.encode()),
                            (b"set-cookie", cookie.encode()),
                            (b"content-security-policy", b"default-src 'none'"),
                            (b"x-content-type-options", b"nosniff"),
                            (b"cache-control", b"no-store"),
                            (b"referrer-policy", b"no-referrer"),
                            (b"content-length", b"0"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": b""})
                return
        await self.app(scope, receive, send)


def local_dashboard(runtime: Runtime, token: str) -> ASGIApp:
    """The dashboard of ``runtime`` for the holder of ``token`` alone."""

    def principal(request: Request) -> str | None:
        return LOCAL_PRINCIPAL if _same(request.cookies.get(COOKIE), token) else None

    return TokenGate(dashboard(runtime, principal=principal), token)


class LocalServer(uvicorn.Server):
    """uvicorn's server, stopping on SIGINT or SIGTERM with exit 0 (as ``worker`` does)
    rather than re-raising the signal once it has shut down gracefully."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        stops = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.stop) for sig in stops}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def stop(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True  # a second Ctrl-C: do not wait for open connections
        self.should_exit = True
