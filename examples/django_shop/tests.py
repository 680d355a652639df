"""The shop's tests through Django's test client: ``python -m examples.django_shop test``."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from django.test import TransactionTestCase

from solid_objects.contrib.django import runtime

from .actors import ABANDONED_AFTER, mail

ALICE = {"HTTP_X_USER": "alice@example.com"}


def sent_when(count: int) -> list[dict[str, Any]]:
    """The mail log once it holds ``count`` emails (effects run after their turn commits)."""
    deadline = time.monotonic() + 30
    while len(mail.sent()) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return mail.sent()


class Shop(TransactionTestCase):
    """TransactionTestCase: the runtime's connections see what the test commits."""

    def setUp(self) -> None:
        mail.path.unlink(missing_ok=True)

    def test_checkout_sends_one_receipt_and_cancels_the_reminder(self) -> None:
        cart = "/carts/alice@example.com"
        assert self.client.post(f"{cart}/items?sku=tea", **ALICE).json() == {"count": 1}
        assert self.client.post(f"{cart}/items?sku=cup", **ALICE).json() == {"count": 2}
        done = self.client.post(f"{cart}/checkout", **ALICE)
        assert done.json() == {"items": ["tea", "cup"]}
        again = self.client.post(f"{cart}/checkout", **ALICE)
        assert again.status_code == 409
        assert again["content-type"] == "application/problem+json"
        assert again.json()["code"] == "checked_out"
        assert self.client.get(cart, HTTP_X_USER="bob@example.com").status_code == 403

        [receipt] = sent_when(1)
        assert (receipt["to"], receipt["template"]) == ("alice@example.com", "receipt")
        assert receipt["items"] == ["tea", "cup"] and receipt["key"]
        later = datetime.now(UTC) + ABANDONED_AFTER + timedelta(minutes=1)
        assert runtime().testing.run_due_reminders(later) == 0  # checkout cancelled it
        assert len(mail.sent()) == 1

    def test_an_abandoned_cart_gets_one_reminder_an_hour_after_its_last_change(self) -> None:
        self.client.post("/carts/carol@example.com/items?sku=tea", HTTP_X_USER="carol@example.com")
        self.client.post("/carts/carol@example.com/items?sku=cup", HTTP_X_USER="carol@example.com")
        soon = datetime.now(UTC) + timedelta(minutes=30)
        assert runtime().testing.run_due_reminders(soon) == 0
        later = datetime.now(UTC) + ABANDONED_AFTER + timedelta(minutes=1)
        runtime().testing.run_due_reminders(later)  # runs here or in a worker: count emails
        [reminder] = sent_when(1)  # one reminder: the second add moved the first
        assert (reminder["template"], reminder["items"]) == ("abandoned-cart", ["tea", "cup"])
        contents = self.client.get("/carts/carol@example.com", HTTP_X_USER="carol@example.com")
        assert contents.json() == {"items": ["tea", "cup"], "checked_out": False}
