"""The Flask application of ``tests/test_contrib_flask.py``.

Served for real with ``flask --app tests.apps.flaskapp run --reload``; the database
URL comes from ``SOLID_TEST_DB``.
"""

from __future__ import annotations

import os

from flask import Flask, request

from solid_objects import Actor, Rejected, query
from solid_objects.contrib.flask import SolidObjects


class Cart(Actor):
    items: list[str] = []

    def add(self, sku: str, quantity: int = 1) -> int:
        if quantity < 1:
            raise Rejected("bad_quantity", "quantity must be at least 1", {"quantity": quantity})
        self.items.extend([sku] * quantity)
        return len(self.items)

    @query
    def count(self) -> int:
        return len(self.items)


def create_app(url: str, **config: object) -> tuple[Flask, SolidObjects]:
    app = Flask(__name__)
    app.config["SOLID_OBJECTS_DATABASE_URL"] = url
    app.config["SOLID_OBJECTS_OPTIONS"] = {"poll_interval": 0.05, "call_timeout": 20.0}
    app.config["SOLID_OBJECTS_ALLOW_ALL_CALLERS"] = True  # no policies: everyone, explicitly
    app.config.update(config)
    solid = SolidObjects(app, context=lambda request: request.headers.get("x-user"))

    @app.post("/carts/<cart_id>/items")
    def add(cart_id: str) -> dict[str, object]:
        quantity: object = request.args.get("quantity", 1)
        if isinstance(quantity, str) and quantity.lstrip("-").isdigit():
            quantity = int(quantity)
        return {"count": solid.ref(Cart, cart_id).add(sku=request.args["sku"], quantity=quantity)}

    @app.get("/carts/<cart_id>")
    def count(cart_id: str) -> dict[str, object]:
        return {"count": solid.ref(Cart, cart_id).count(), "pid": os.getpid()}

    @app.get("/carts/<cart_id>/op/<name>")
    def unknown(cart_id: str, name: str) -> object:
        return getattr(solid.ref(Cart, cart_id), name)()

    return app, solid


if "SOLID_TEST_DB" in os.environ:
    app, solid = create_app(os.environ["SOLID_TEST_DB"])
