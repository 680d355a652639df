"""solid_objects.contrib.fastapi: lifespan, problem details, ref dependency, authorization."""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations, which
# name dependencies local to each test.

from contextlib import asynccontextmanager
from typing import Annotated, Any

import pytest
from fastapi import Depends, FastAPI, Header, Request
from fastapi.testclient import TestClient

from solid_objects import Actor, AsyncRef, AsyncRuntime, Ref, Rejected, Runtime, query
from solid_objects.authorization import AuthorizationRequest
from solid_objects.contrib import fastapi as solid
from solid_objects.contrib.problems import MEDIA_TYPE, TYPE_BASE
from solid_objects.errors import SchemaNotInstalled, UnknownActorType

from .conftest import FAST


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


def shop(runtime: AsyncRuntime | Runtime, **lifespan: Any) -> FastAPI:
    """The application under test; every endpoint goes through the contrib pieces.

    Its runtime has no policies, so every caller is let through explicitly.
    """
    lifespan.setdefault("allow_all_callers", True)
    app = FastAPI(lifespan=solid.lifespan(runtime, **lifespan))
    for cls, handler in solid.exception_handlers().items():
        app.add_exception_handler(cls, handler)
    cart_ref = solid.actor(Cart, path_param="cart_id")

    if isinstance(runtime, AsyncRuntime):

        @app.post("/carts/{cart_id}/items")
        async def add(cart: Annotated[Any, Depends(cart_ref)], sku: str, quantity: Any = 1) -> int:
            assert isinstance(cart, AsyncRef)
            return int(await cart.add(sku=sku, quantity=_number(quantity)))

        @app.get("/carts/{cart_id}")
        async def count(cart: Annotated[Any, Depends(cart_ref)]) -> int:
            return int(await cart.count())

        @app.get("/carts/{cart_id}/op/{name}")
        async def unknown(name: str, cart: Annotated[Any, Depends(cart_ref)]) -> Any:
            return await getattr(cart, name)()

    else:

        @app.post("/carts/{cart_id}/items")
        def add_sync(cart: Annotated[Any, Depends(cart_ref)], sku: str, quantity: Any = 1) -> int:
            assert isinstance(cart, Ref)
            return int(cart.add(sku=sku, quantity=_number(quantity)))

        @app.get("/carts/{cart_id}")
        def count_sync(cart: Annotated[Any, Depends(cart_ref)]) -> int:
            return int(cart.count())

    @app.get("/runtime")
    def which(found: Annotated[Any, Depends(solid.current_runtime)]) -> bool:
        return found is runtime

    @app.get("/types/{name}")
    def unknown_type(name: str) -> None:
        raise UnknownActorType(f"no actor type {name!r}")

    return app


def _number(value: str) -> Any:
    """The query string's text as an int when it is one, else as is (to reach the library)."""
    return int(value) if isinstance(value, str) and value.lstrip("-").isdigit() else value


@pytest.mark.parametrize("face", ["async", "sync"])
def test_the_lifespan_runs_twice_in_one_process_on_one_runtime(db_url: str, face: str) -> None:
    runtime: AsyncRuntime | Runtime = (
        AsyncRuntime(db_url, **FAST) if face == "async" else Runtime(db_url, **FAST)
    )
    app = shop(runtime)
    try:
        for expected in (1, 2):
            with TestClient(app) as client:
                added = client.post("/carts/c1/items", params={"sku": "apple"})
                assert added.status_code == 200, added.text
                assert added.json() == expected
                assert client.get("/carts/c1").json() == expected
                assert client.get("/runtime").json() is True
    finally:
        (runtime.sync if isinstance(runtime, AsyncRuntime) else runtime).close()


def test_the_wrapped_lifespan_runs_inside_with_the_runtime_started(db_url: str) -> None:
    runtime = AsyncRuntime(db_url, **FAST)
    seen: list[Any] = []

    @asynccontextmanager
    async def app_lifespan(app: FastAPI) -> Any:
        seen.append(await runtime.ref(Cart, "warm").add(sku="x"))  # the runtime is running
        yield {"greeting": "hello"}
        seen.append(await runtime.ref(Cart, "warm").count())  # still running at shutdown

    app = FastAPI(lifespan=solid.lifespan(runtime, wraps=app_lifespan))

    @app.get("/greeting")
    async def greeting(request: Request) -> str:
        return str(request.state.greeting)

    try:
        with TestClient(app) as client:
            assert client.get("/greeting").json() == "hello"
        assert seen == [1, 1]
    finally:
        runtime.sync.close()


def problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == MEDIA_TYPE
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["type"].startswith(TYPE_BASE)
    assert body["title"] and body["detail"]
    return body


def test_each_library_error_is_a_problem_details_response(db_url: str) -> None:
    runtime = AsyncRuntime(db_url, **FAST)
    with TestClient(shop(runtime)) as client:
        rejected = problem(client.post("/carts/c1/items", params={"sku": "a", "quantity": 0}), 409)
        assert rejected["code"] == "bad_quantity"
        assert rejected["detail"] == "quantity must be at least 1"
        assert rejected["details"] == {"quantity": 0}
        assert rejected["message_id"]

        invalid = problem(client.post("/carts/c1/items", params={"sku": "a", "quantity": "x"}), 422)
        assert invalid["code"] == "InvalidArguments"
        assert "quantity" in invalid["detail"]

        unknown = problem(client.get("/carts/c1/op/nope"), 404)
        assert unknown["code"] == "UnknownOperation"
        assert problem(client.get("/types/Ghost"), 404)["code"] == "UnknownActorType"
        assert client.get("/carts/c1").json() == 0  # nothing was written by any of them


def test_a_call_timeout_is_504_with_the_message_id_to_poll(db_url: str) -> None:
    runtime = AsyncRuntime(db_url, **{**FAST, "workers": 0})  # nobody runs the message
    app = FastAPI(
        lifespan=solid.lifespan(runtime, allow_all_callers=True),
        exception_handlers=solid.exception_handlers(),
    )

    @app.post("/carts/{cart_id}/items")
    async def add(cart: Annotated[Any, Depends(solid.actor(Cart, path_param="cart_id"))]) -> int:
        return int(await cart.add.with_options(timeout=0.2)(sku="a"))

    with TestClient(app) as client:
        body = problem(client.post("/carts/c1/items"), 504)
        assert body["code"] == "CallTimeout"
        message = runtime.sync.message(Cart, body["message_id"])
        assert message.status() == "queued"  # durable: a worker will still run it


def test_without_the_lifespan_the_request_gets_503(db_url: str) -> None:
    runtime = AsyncRuntime(db_url, **FAST)
    client = TestClient(shop(runtime))  # not entered: the lifespan never ran
    body = problem(client.get("/carts/c1"), 503)
    assert "lifespan" in body["detail"]
    assert body["code"] == "RuntimeNotStarted"


def test_the_lifespan_context_hook_reaches_the_message_policy(db_url: str) -> None:
    seen: list[Any] = []

    def owner_only(request: AuthorizationRequest) -> bool:
        seen.append(request.context)
        return request.actor_id == f"cart-{request.context}"

    runtime = AsyncRuntime(db_url, **FAST, authorize_message=owner_only)
    app = shop(runtime, context=lambda request: request.headers.get("x-user"))
    with TestClient(app) as client:
        mine = client.post(
            "/carts/cart-alice/items", params={"sku": "a"}, headers={"x-user": "alice"}
        )
        assert mine.status_code == 200, mine.text
        theirs = client.post(
            "/carts/cart-alice/items", params={"sku": "a"}, headers={"x-user": "bob"}
        )
        assert problem(theirs, 403)["code"] == "Unauthorized"
    assert seen == ["alice", "bob"]


def test_the_context_dependency_of_actor_reaches_the_message_policy(db_url: str) -> None:
    seen: list[Any] = []

    def owner_only(request: AuthorizationRequest) -> bool:
        seen.append(request.context)
        return request.actor_id == f"cart-{request.context['user']}"

    async def current_user(x_user: str = Header()) -> dict[str, str]:
        return {"user": x_user}

    runtime = AsyncRuntime(db_url, **FAST, authorize_message=owner_only)
    app = FastAPI(lifespan=solid.lifespan(runtime), exception_handlers=solid.exception_handlers())
    cart_ref = solid.actor(Cart, path_param="cart_id", context=current_user)

    @app.post("/carts/{cart_id}/items")
    async def add(cart: Annotated[Any, Depends(cart_ref)]) -> int:
        return int(await cart.add(sku="a"))

    with TestClient(app) as client:
        assert client.post("/carts/cart-carol/items", headers={"x-user": "carol"}).json() == 1
        problem(client.post("/carts/cart-carol/items", headers={"x-user": "dave"}), 403)
        assert client.post("/carts/cart-carol/items").status_code == 422  # FastAPI: no header
        schema = client.get("/openapi.json").json()
    assert seen == [{"user": "carol"}, {"user": "dave"}]
    names = [p["name"] for p in schema["paths"]["/carts/{cart_id}/items"]["post"]["parameters"]]
    assert sorted(names) == ["cart_id", "x-user"]  # the path parameter is documented


def test_a_failed_start_is_the_startup_error_and_the_next_lifespan_works(db_url: str) -> None:
    runtime = AsyncRuntime(db_url, **FAST)
    with pytest.raises(SchemaNotInstalled):  # install=False on an empty database
        with TestClient(shop(runtime, install=False)):
            pass
    with TestClient(shop(runtime)) as client:
        assert client.post("/carts/c1/items", params={"sku": "a"}).json() == 1
