"""The shop's actors, runtime and effect: imported by the web app and by the worker.

``solid-objects worker examples.fastapi_shop.actors:runtime`` runs the turns in a
process of its own; the web processes can then run with ``SHOP_WORKERS=0``.
"""

from __future__ import annotations

import fcntl
import json
import os
from datetime import timedelta
from pathlib import Path

from solid_objects import Actor, AsyncRuntime, EffectContext, Rejected, query
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


def own_cart_only(request: AuthorizationRequest) -> bool:
    """A customer (the ``X-User`` header, see app.py) touches only their own cart."""
    return request.context is not None and request.actor_id == request.context


runtime = AsyncRuntime(
    os.environ.get("SHOP_DATABASE_URL", "sqlite:///shop.db"),
    workers=int(os.environ.get("SHOP_WORKERS", "4")),
    authorize_message=own_cart_only,
    authorize_query=own_cart_only,
)


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


mail = MailLog(Path(os.environ.get("SHOP_MAIL_LOG", "mail.log")))


@runtime.effect("send_email")
def send_email(ctx: EffectContext, to: str, template: str, items: list[str]) -> None:
    mail.send(to, template, items, idempotency_key=ctx.id)  # the same ctx.id on every retry
