"""The shop's HTTP API: FastAPI over the cart actor, through solid_objects.contrib."""

from __future__ import annotations

import os
from typing import Annotated, Any

from solid_objects.extras import requires_extra

with requires_extra("fastapi", "examples.fastapi_shop"):
    from fastapi import Depends, FastAPI, Header

from solid_objects import AsyncRef
from solid_objects.contrib.fastapi import IdempotencyKeys, actor, exception_handlers, lifespan

from .actors import Cart, runtime


def customer(x_user: Annotated[str | None, Header()] = None) -> str | None:
    """Stands in for authentication: the customer's email address, from a header."""
    return x_user


app = FastAPI(
    title="Solid Objects shop",
    lifespan=lifespan(runtime),
    exception_handlers=exception_handlers(),
)
CartRef = Annotated[AsyncRef[Cart], Depends(actor(Cart, path_param="cart_id", context=customer))]


# A client that retries a POST with the same Idempotency-Key header (after a 504, a
# dropped connection) gets the first attempt's outcome: the item is added once.
@app.post("/carts/{cart_id}/items")
async def add_item(cart: CartRef, sku: str, keys: IdempotencyKeys) -> dict[str, int]:
    return {"count": await keys.keyed(cart.add)(sku=sku)}


@app.post("/carts/{cart_id}/checkout")
async def checkout(cart: CartRef, keys: IdempotencyKeys) -> dict[str, list[str]]:
    return {"items": await keys.keyed(cart.checkout)()}


@app.get("/carts/{cart_id}")
async def contents(cart: CartRef) -> dict[str, Any]:
    return {**await cart.contents(), "pid": os.getpid()}
