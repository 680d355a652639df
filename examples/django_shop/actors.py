"""The shop's actor and its effect, found by the app's autodiscovery of ``actors``."""

from __future__ import annotations

import os
from pathlib import Path

from solid_objects import EffectContext
from solid_objects.contrib.django import effect

from ..shop import ABANDONED_AFTER, Cart, MailLog

__all__ = ["ABANDONED_AFTER", "Cart", "mail"]

mail = MailLog(Path(os.environ.get("SHOP_MAIL_LOG", "mail.log")))


@effect("send_email")
def send_email(ctx: EffectContext, to: str, template: str, items: list[str]) -> None:
    mail.send(to, template, items, idempotency_key=ctx.id)  # the same ctx.id on every retry
