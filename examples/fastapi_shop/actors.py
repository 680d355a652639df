"""The shop's actors, runtime and effect: imported by the web app and by the worker.

``solid-objects worker examples.fastapi_shop.actors:runtime`` runs the turns in a
process of its own; the web processes can then run with ``SHOP_WORKERS=0``.
"""

from __future__ import annotations

import os
from pathlib import Path

from solid_objects import AsyncRuntime, EffectContext

from ..shop import ABANDONED_AFTER, Cart, MailLog, own_cart_only

__all__ = ["ABANDONED_AFTER", "Cart", "mail", "runtime"]

runtime = AsyncRuntime(
    os.environ.get("SHOP_DATABASE_URL", "sqlite:///shop.db"),
    workers=int(os.environ.get("SHOP_WORKERS", "4")),
    authorize_message=own_cart_only,
    authorize_query=own_cart_only,
)


mail = MailLog(Path(os.environ.get("SHOP_MAIL_LOG", "mail.log")))


@runtime.effect("send_email")
def send_email(ctx: EffectContext, to: str, template: str, items: list[str]) -> None:
    mail.send(to, template, items, idempotency_key=ctx.id)  # the same ctx.id on every retry
