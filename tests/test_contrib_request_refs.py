"""Refs the web integrations build from request data: denied by default, keyed by the
request's Idempotency-Key, and pointed at a fresh database per test.

FastAPI (async and sync runtimes), plain Starlette and Flask, on every database; the
Django side is in the test project (tests/apps/djangoproject/shop/checks_requests.py,
run by tests/test_contrib_django.py).
"""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations.

from typing import Annotated, Any

import pytest
import sqlalchemy
from fastapi import Depends, FastAPI, Header
from fastapi.testclient import TestClient
from flask import Flask, request
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from solid_objects import Actor, AsyncRuntime, Rejected, Runtime, query
from solid_objects.authorization import AuthorizationRequest, Untrusted
from solid_objects.contrib import fastapi as solid_fastapi
from solid_objects.contrib import flask as solid_flask
from solid_objects.contrib import starlette as solid_starlette
from solid_objects.errors import Unauthorized

from .conftest import FAST


class Basket(Actor):
    items: list[str] = []

    def add(self, sku: str) -> int:
        if not sku:
            raise Rejected("empty_sku", "a sku is needed")
        self.items.append(sku)
        return len(self.items)

    @query
    def count(self) -> int:
        return len(self.items)


def rows(url: str) -> tuple[int, int]:
    """(messages, actors) stored in the database at ``url``."""
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as db:
            count = [
                int(db.execute(sqlalchemy.text(f"SELECT count(*) FROM {t}")).scalar_one())
                for t in ("solid_messages", "solid_actors")
            ]
            return count[0], count[1]
    finally:
        engine.dispose()


def owner_only(request: AuthorizationRequest) -> bool:
    return request.actor_id == f"basket-{request.context}"


def fastapi_app(runtime: AsyncRuntime | Runtime, **lifespan: Any) -> FastAPI:
    app = FastAPI(
        lifespan=solid_fastapi.lifespan(runtime, **lifespan),
        exception_handlers=solid_fastapi.exception_handlers(),
    )

    def user(x_user: Annotated[str | None, Header()] = None) -> str | None:
        return x_user

    basket = solid_fastapi.actor(Basket, path_param="basket_id", context=user)
    Keys = solid_fastapi.IdempotencyKeys

    if isinstance(runtime, AsyncRuntime):

        @app.post("/baskets/{basket_id}/items")
        async def add(b: Annotated[Any, Depends(basket)], sku: str, keys: Keys) -> int:
            first = int(await keys.keyed(b.add)(sku=sku))
            await keys.keyed(b.add)(sku=sku + "-gift")  # a second keyed call of the request
            return first

        @app.get("/baskets/{basket_id}")
        async def count(b: Annotated[Any, Depends(basket)]) -> int:
            return int(await b.count())

    else:

        @app.post("/baskets/{basket_id}/items")
        def add_sync(b: Annotated[Any, Depends(basket)], sku: str, keys: Keys) -> int:
            first = int(keys.keyed(b.add)(sku=sku))
            keys.keyed(b.add)(sku=sku + "-gift")
            return first

        @app.get("/baskets/{basket_id}")
        def count_sync(b: Annotated[Any, Depends(basket)]) -> int:
            return int(b.count())

    return app


def starlette_app(runtime: AsyncRuntime, **lifespan: Any) -> Starlette:
    async def add(request: Request) -> JSONResponse:
        keys = solid_starlette.idempotency_keys(request, required=True)
        b = solid_starlette.ref(request, Basket, request.path_params["basket_id"])
        return JSONResponse(await keys.keyed(b.add)(sku=request.query_params["sku"]))

    return Starlette(
        routes=[Route("/baskets/{basket_id}/items", add, methods=["POST"])],
        lifespan=solid_starlette.lifespan(
            runtime, context=lambda request: request.headers.get("x-user"), **lifespan
        ),
        exception_handlers=solid_starlette.exception_handlers(),
    )


def flask_app(url: str, **config: Any) -> tuple[Flask, solid_flask.SolidObjects]:
    app = Flask(__name__)
    app.config.update(
        {
            "SOLID_OBJECTS_DATABASE_URL": url,
            "SOLID_OBJECTS_OPTIONS": {**FAST, "workers": 2},
            **config,
        }
    )
    solid = solid_flask.SolidObjects(app, context=lambda request: request.headers.get("x-user"))

    @app.post("/baskets/<basket_id>/items")
    def add(basket_id: str) -> Any:
        keys = solid_flask.idempotency_keys()
        b = solid.ref(Basket, basket_id)
        first = keys.keyed(b.add)(sku=request.args["sku"])
        keys.keyed(b.add)(sku=request.args["sku"] + "-gift")
        return {"count": first}

    @app.get("/baskets/<basket_id>")
    def count(basket_id: str) -> Any:
        return {"count": solid.ref(Basket, basket_id).count()}

    return app, solid


def make(face: str, url: str, **options: Any) -> AsyncRuntime | Runtime:
    return (AsyncRuntime if face == "async" else Runtime)(url, **{**FAST, **options})


def close(runtime: AsyncRuntime | Runtime) -> None:
    (runtime.sync if isinstance(runtime, AsyncRuntime) else runtime).close()


# --- refs built from request data: denied unless a policy or the opt-in ---------------


@pytest.mark.parametrize("face", ["async", "sync"])
def test_fastapi_request_refs_without_a_policy_are_refused_and_write_nothing(
    db_url: str, face: str
) -> None:
    runtime = make(face, db_url)
    try:
        with TestClient(fastapi_app(runtime)) as client:
            refused = client.post("/baskets/b1/items", params={"sku": "tea"})
            assert refused.status_code == 403, refused.text
            body = refused.json()
            assert body["code"] == "Unauthorized"
            assert "allow_all_callers=True" in body["detail"]
            assert "authorize_message" in body["detail"]
            assert client.get("/baskets/b1").status_code == 403  # a query, the same
        assert rows(db_url) == (0, 0)
    finally:
        close(runtime)


@pytest.mark.parametrize("face", ["async", "sync"])
def test_fastapi_request_refs_pass_with_the_opt_in_or_per_kind_policies(
    db_url: str, face: str
) -> None:
    runtime = make(face, db_url)
    try:
        with TestClient(fastapi_app(runtime, allow_all_callers=True)) as client:
            assert client.post("/baskets/b1/items", params={"sku": "tea"}).json() == 1
            assert client.get("/baskets/b1").json() == 2
    finally:
        close(runtime)
    policed = make(face, db_url, authorize_message=owner_only)
    try:
        with TestClient(fastapi_app(policed)) as client:
            ann = {"x-user": "ann"}
            added = client.post("/baskets/basket-ann/items", params={"sku": "x"}, headers=ann)
            assert added.status_code == 200, added.text
            other = client.post("/baskets/b1/items", params={"sku": "x"}, headers=ann)
            assert other.status_code == 403
            # The message policy does not cover queries: with no query policy they stay denied.
            assert client.get("/baskets/basket-ann", headers=ann).status_code == 403
    finally:
        close(policed)


def test_starlette_request_refs_without_a_policy_are_refused(db_url: str) -> None:
    runtime = AsyncRuntime(db_url, **FAST)
    try:
        with TestClient(starlette_app(runtime)) as client:
            key = {"idempotency-key": '"k1"'}
            refused = client.post("/baskets/b1/items?sku=tea", headers=key)
            assert (refused.status_code, refused.json()["code"]) == (403, "Unauthorized")
        assert rows(db_url) == (0, 0)
        with TestClient(starlette_app(runtime, allow_all_callers=True)) as client:
            assert client.post("/baskets/b1/items?sku=tea", headers=key).json() == 1
    finally:
        runtime.sync.close()


def test_flask_request_refs_without_a_policy_are_refused_and_write_nothing(db_url: str) -> None:
    app, solid = flask_app(db_url)
    try:
        client = app.test_client()
        refused = client.post("/baskets/b1/items?sku=tea")
        assert refused.status_code == 403
        assert "allow_all_callers=True" in refused.get_json()["detail"]
        assert client.get("/baskets/b1").status_code == 403
        assert rows(db_url) == (0, 0)
        with app.app_context():  # outside a request: the application's own, trusted ref
            assert solid.ref(Basket, "b1").count() == 0
    finally:
        solid.close()
    opted, solid = flask_app(db_url, SOLID_OBJECTS_ALLOW_ALL_CALLERS=True)
    try:
        assert opted.test_client().post("/baskets/b1/items?sku=tea").get_json() == {"count": 1}
    finally:
        solid.close()
    options = {**FAST, "workers": 2, "authorize_message": owner_only, "authorize_query": owner_only}
    policed, solid = flask_app(db_url, SOLID_OBJECTS_OPTIONS=options)
    try:
        client = policed.test_client()
        ann = {"x-user": "ann"}
        added = client.post("/baskets/basket-ann/items?sku=x", headers=ann)
        assert added.get_json() == {"count": 1}
        assert client.get("/baskets/basket-ann", headers=ann).get_json() == {"count": 2}
        assert client.get("/baskets/basket-ann", headers={"x-user": "bo"}).status_code == 403
    finally:
        solid.close()


def test_replacing_the_context_of_a_request_ref_keeps_it_untrusted(db_url: str) -> None:
    runtime = Runtime(db_url, **FAST)
    runtime.install()
    runtime.start()
    try:
        from_request = runtime.ref(Basket, "b1").with_options(authorization=Untrusted("ann"))
        with pytest.raises(Unauthorized, match="request data"):
            from_request.with_options(authorization="admin").add(sku="x")
        with pytest.raises(Unauthorized, match="request data"):
            from_request.add.with_options(authorization="admin")(sku="x")
        assert runtime.ref(Basket, "b1").add(sku="x") == 1  # the application's own call
    finally:
        runtime.close()


# --- Idempotency-Key --------------------------------------------------------------------


@pytest.mark.parametrize("face", ["async", "sync"])
def test_fastapi_a_retried_request_with_the_same_key_applies_once(db_url: str, face: str) -> None:
    runtime = make(face, db_url)
    try:
        with TestClient(fastapi_app(runtime, allow_all_callers=True)) as client:
            key = {"Idempotency-Key": '"8e03978e-40d5-43e8-bc93-6894a57f9324"'}
            for _ in range(3):  # the client retries twice
                again = client.post("/baskets/b1/items", params={"sku": "tea"}, headers=key)
                assert again.status_code == 200, again.text
                assert again.json() == 1  # the first outcome each time
            other = client.post("/baskets/b1/items", params={"sku": "cake"}, headers=key)
            assert other.status_code == 422, other.text
            assert other.json()["code"] == "IdempotencyConflict"
            bad = client.post(
                "/baskets/b1/items",
                params={"sku": "x"},
                headers={"Idempotency-Key": '"unterminated'},
            )
            assert (bad.status_code, bad.json()["code"]) == (400, "InvalidIdempotencyKey")
            unkeyed = client.post("/baskets/b1/items", params={"sku": "jam"})
            assert unkeyed.json() == 3  # without the header, every request is new
        check = make(face, db_url)
        try:
            sync = check.sync if isinstance(check, AsyncRuntime) else check
            assert sync.ref(Basket, "b1").snapshot() == {
                "items": ["tea", "tea-gift", "jam", "jam-gift"]
            }
        finally:
            close(check)
        assert rows(db_url)[0] == 4  # four messages: the retries and refusals wrote none
    finally:
        close(runtime)


def test_starlette_a_required_key_is_400_when_missing(db_url: str) -> None:
    runtime = AsyncRuntime(db_url, **FAST)
    try:
        with TestClient(starlette_app(runtime, allow_all_callers=True)) as client:
            missing = client.post("/baskets/b1/items?sku=tea")
            assert (missing.status_code, missing.json()["code"]) == (400, "InvalidIdempotencyKey")
            key = {"idempotency-key": "bare-token-1"}
            assert client.post("/baskets/b1/items?sku=tea", headers=key).json() == 1
            assert client.post("/baskets/b1/items?sku=tea", headers=key).json() == 1
        assert rows(db_url)[0] == 1
    finally:
        runtime.sync.close()


def test_flask_a_retried_request_with_the_same_key_applies_once(db_url: str) -> None:
    app, solid = flask_app(db_url, SOLID_OBJECTS_ALLOW_ALL_CALLERS=True)
    try:
        client = app.test_client()
        key = {"Idempotency-Key": '"retry-me"'}
        for _ in range(3):
            assert client.post("/baskets/b1/items?sku=tea", headers=key).get_json() == {"count": 1}
        other = client.post("/baskets/b1/items?sku=cake", headers=key)
        assert (other.status_code, other.get_json()["code"]) == (422, "IdempotencyConflict")
        bad = client.post("/baskets/b1/items?sku=x", headers={"Idempotency-Key": 'a"b'})
        assert (bad.status_code, bad.get_json()["code"]) == (400, "InvalidIdempotencyKey")
        with app.app_context():
            assert solid.ref(Basket, "b1").snapshot() == {"items": ["tea", "tea-gift"]}
        assert rows(db_url)[0] == 2
    finally:
        solid.close()


# --- a fresh database per test for the application's own runtime --------------------------


def test_fastapi_use_database_runs_the_lifespan_on_another_database(
    db_url: str, tmp_path: Any
) -> None:
    runtime = AsyncRuntime(f"sqlite:///{tmp_path / 'development.db'}", authorize_message=owner_only)
    runtime.sync.install()
    app = fastapi_app(runtime, allow_all_callers=True)
    for _ in range(2):  # the same test twice: each time on an emptied database
        with solid_fastapi.use_database(app, db_url), TestClient(app) as client:
            ann = {"x-user": "ann"}
            # The test runtime copied the application's policy (a bob call is refused).
            assert client.post("/baskets/basket-ann/items?sku=a", headers=ann).json() == 1
            assert (
                client.post("/baskets/basket-ann/items?sku=a", headers={"x-user": "bo"}).status_code
                == 403
            )
        assert rows(db_url)[0] == 2
        reset = Runtime(db_url, allow_reset=True)
        reset.testing.reset()
        reset.close()
    assert rows(f"sqlite:///{tmp_path / 'development.db'}") == (0, 0)  # never touched
    runtime.sync.close()


def test_flask_use_database_runs_requests_on_another_database(db_url: str, tmp_path: Any) -> None:
    development = f"sqlite:///{tmp_path / 'development.db'}"
    app, solid = flask_app(development, SOLID_OBJECTS_ALLOW_ALL_CALLERS=True)
    solid.runtime.install()
    own = solid.runtime
    with solid.use_database(db_url) as test_runtime:
        assert solid.runtime is test_runtime and test_runtime is not own
        assert app.test_client().post("/baskets/b1/items?sku=a").get_json() == {"count": 1}
    assert solid.runtime is own
    assert rows(db_url)[0] == 2
    assert rows(development) == (0, 0)
    solid.close()
