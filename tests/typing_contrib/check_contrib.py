"""Static typing of solid_objects.contrib as applications use it (type-checked, never run).

Checked by ``mypy --strict`` (listed in pyproject's ``[tool.mypy] files``, apart from
``tests/typing``, whose contract ``tests/test_typing.py`` checks file by file): the
lifespan fits ``FastAPI(lifespan=...)`` and ``Starlette(lifespan=...)``, with or
without the application's own lifespan, ``exception_handlers()`` fits both
frameworks' ``exception_handlers=``, and the refs keep the typed call form.
"""

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI
from flask import Flask
from starlette.applications import Starlette

from solid_objects import Actor, AsyncRef, AsyncRuntime, Runtime
from solid_objects.contrib import fastapi as solid_fastapi
from solid_objects.contrib import starlette as solid_starlette
from solid_objects.contrib.flask import SolidObjects


class Cart(Actor):
    items: list[str] = []

    def add(self, sku: str) -> int:
        self.items.append(sku)
        return len(self.items)


runtime = AsyncRuntime("sqlite:///typing.db")


@asynccontextmanager
async def own(_app: FastAPI) -> AsyncGenerator[None]:
    yield


api = FastAPI(
    lifespan=solid_fastapi.lifespan(runtime, wraps=own),
    exception_handlers=solid_fastapi.exception_handlers(),
)
plain = Starlette(
    lifespan=solid_starlette.lifespan(Runtime("sqlite:///typing.db")),
    exception_handlers=solid_starlette.exception_handlers(),
)
CartRef = Annotated[AsyncRef[Cart], Depends(solid_fastapi.actor(Cart, path_param="cart_id"))]


@api.post("/carts/{cart_id}/items")
async def add(cart: CartRef, sku: str) -> int:
    return await cart.call(Cart.add, sku=sku)


flask_app = Flask(__name__)
extension = SolidObjects(flask_app, runtime=Runtime("sqlite:///typing.db"))
count: int = extension.ref(Cart, "c").call(Cart.add, sku="x")
