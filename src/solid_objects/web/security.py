"""The dashboard's browser-facing defences: CSRF tokens and the security headers.

CSRF is session-less: a page carries ``mask || (mask XOR HMAC(secret, principal))``
with a fresh random mask on every page (so the token on a page never repeats and
a compression side channel learns nothing), and a POST is accepted only when the
unmasked value is the HMAC of the principal making the request. The secret is
random per app unless the host passes one (several processes behind one
balancer share it). A token stolen from one principal's page is useless to
another, and a cross-site form cannot read any page to learn one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_SIZE = 32  # sha256


class CsrfTokens:
    """Issue and check masked per-principal CSRF tokens."""

    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret if secret is not None else secrets.token_bytes(32)

    def _raw(self, principal: str) -> bytes:
        return hmac.new(self._secret, b"csrf\0" + principal.encode(), hashlib.sha256).digest()

    def issue(self, principal: str) -> str:
        mask = secrets.token_bytes(_SIZE)
        masked = bytes(a ^ b for a, b in zip(mask, self._raw(principal), strict=True))
        return base64.urlsafe_b64encode(mask + masked).decode().rstrip("=")

    def check(self, principal: str, token: str | None) -> bool:
        if not token or len(token) > 200:
            return False
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except ValueError:
            return False
        if len(raw) != 2 * _SIZE:
            return False
        mask, masked = raw[:_SIZE], raw[_SIZE:]
        unmasked = bytes(a ^ b for a, b in zip(mask, masked, strict=True))
        return hmac.compare_digest(unmasked, self._raw(principal))


def content_security_policy(nonce: str) -> str:
    """Nothing loads but the dashboard's own scripts (by nonce) and style sheet."""
    return (
        "default-src 'none'; "
        f"script-src 'nonce-{nonce}'; "
        "style-src 'self'; "
        "img-src 'self' data:; "
        "connect-src 'self'; "
        "frame-ancestors 'none'; "
        "base-uri 'none'; "
        "form-action 'self'"
    )


class SecurityHeaders:
    """ASGI middleware: a fresh CSP nonce per request (``scope["state"]["csp_nonce"]``)
    and the strict headers on every response, errors included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        nonce = secrets.token_urlsafe(18)
        scope.setdefault("state", {})["csp_nonce"] = nonce
        extra = [
            (b"content-security-policy", content_security_policy(nonce).encode()),
            (b"x-content-type-options", b"nosniff"),
            (b"cache-control", b"no-store"),
            (b"x-frame-options", b"DENY"),
            (b"referrer-policy", b"no-referrer"),
            (b"cross-origin-opener-policy", b"same-origin"),
        ]
        names = {name for name, _ in extra}

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message["headers"] = headers + extra
            await send(message)

        await self.app(scope, receive, send_with_headers)
