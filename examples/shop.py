"""The shop's cart actor and its stand-in mail provider, shared by the example shops.

``examples/fastapi_shop`` and ``examples/django_shop`` serve this one ``Cart``; each
registers the ``send_email`` effect on its own runtime.
"""

from __future__ import annotations

import fcntl
import json
from datetime import timedelta
from pathlib import Path

from solid_objects import Actor, Rejected, query
from solid_objects.authorization import AuthorizationRequest

#: A cart nobody checked out this long after its last change gets a reminder email.
ABANDONED_AFTER = timedelta(hours=1)


class Cart(Actor):
    """One per customer; the actor id is the customer's email address."""

    items: list[str] = []
    checked_out: bool = False

    def add(self, sku: str) -> int:
        if self.checked_out:
            raise Rejected("checked_out", "this cart was checked out", {"sku": sku})
        self.items.append(sku)
        # One reminder per cart: scheduling it again moves it an hour past this change.
        self.schedule(delay=ABANDONED_AFTER, key="abandoned").remind_abandoned()
        return len(self.items)

    def checkout(self) -> list[str]:
        if self.checked_out:
            raise Rejected("checked_out", "this cart was checked out already")
        if not self.items:
            raise Rejected("empty", "an empty cart cannot check out")
        self.checked_out = True
        self.cancel_schedule(Cart.remind_abandoned, key="abandoned")
        self.emit("send_email", to=self.actor_id, template="receipt", items=list(self.items))
        return self.items

    def remind_abandoned(self) -> None:
        if self.items and not self.checked_out:
            self.emit("send_email", to=self.actor_id, template="abandoned-cart", items=self.items)

    @query
    def contents(self) -> dict[str, object]:
        return {"items": self.items, "checked_out": self.checked_out}


class MailLog:
    """Stands in for the mail provider: one JSON line per email, once per idempotency key.

    A file, so every process (uvicorn's workers, a dedicated worker) shares it; a real
    provider takes ``ctx.id`` as its idempotency key instead.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def send(self, to: str, template: str, items: list[str], idempotency_key: str) -> None:
        with self.path.open("a+", encoding="utf-8") as log:
            fcntl.flock(log, fcntl.LOCK_EX)
            log.seek(0)
            if any(json.loads(line)["key"] == idempotency_key for line in log if line.strip()):
                return  # a retry of an email already sent
            record = {"to": to, "template": template, "items": items, "key": idempotency_key}
            log.write(json.dumps(record) + "\n")

    def sent(self) -> list[dict[str, object]]:
        if not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]


def own_cart_only(request: AuthorizationRequest) -> bool:
    """A customer (the ``X-User`` header) touches only their own cart."""
    return request.context is not None and request.actor_id == request.context
