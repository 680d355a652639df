"""An idempotency key shows the message stored under it only to a caller who may read
that message; a missing message id costs the policy's time like a refused one.

The scene, on every backend: anyone may pay into the landlord's account, but a stored
payment may be read only by the account's owner or by its payer. Alice pays the rent
under her key; Bob, who guessed or overheard the key, reuses it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import pytest
from fastapi import Depends, FastAPI, Header
from fastapi.testclient import TestClient
from sqlalchemy import create_engine

from solid_objects import Actor, AsyncRef, AsyncRuntime, AuthorizationRequest, Runtime
from solid_objects.contrib import problems
from solid_objects.contrib.fastapi import IdempotencyKeys, actor, exception_handlers, lifespan
from solid_objects.errors import IdempotencyConflict, MessageNotFound, Unauthorized

from .conftest import FAST, count_rows

SECRET = "rent flat 3B, IBAN DE89"
KEY = "rent-2026-12"


class Ledger(Actor):
    balance: int = 0

    def pay(self, payer: str, amount: int, note: str) -> int:
        self.balance += amount
        return self.balance


ASKED: list[AuthorizationRequest] = []


def policy(request: AuthorizationRequest) -> bool:
    """Anyone may pay; a stored payment is read by the owner or its payer only."""
    ASKED.append(request)
    if request.message_id is None:
        return True
    return request.context in (request.actor_id, request.arguments.get("payer"))


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Iterator[Runtime]:
    ASKED.clear()
    runtime = make_runtime(authorize_message=policy)
    with runtime:
        yield runtime


def as_(rt: Runtime, who: str) -> Any:
    return rt.ref(Ledger, "landlord").with_options(authorization=who)


def alice_pays(rt: Runtime) -> str:
    sent = as_(rt, "alice").pay.with_options(idempotency_key=KEY).send(
        payer="alice", amount=900, note=SECRET
    )
    assert sent.wait(timeout=20) == 900
    return str(sent.id)


def test_another_principal_reusing_the_key_with_other_arguments_learns_nothing(
    rt: Runtime,
) -> None:
    alice_pays(rt)
    with pytest.raises(Unauthorized) as refused:
        as_(rt, "bob").pay.with_options(idempotency_key=KEY).send(
            payer="bob", amount=1, note="mine"
        )
    shown = str(refused.value) + repr(refused.value)
    assert SECRET not in shown and "900" not in shown and "alice" not in shown
    assert refused.value.__context__ is None and refused.value.__cause__ is None
    assert count_rows(rt, "messages") == 1


def test_another_principal_reusing_the_key_with_the_same_call_gets_no_id_or_result(
    rt: Runtime,
) -> None:
    alice_id = alice_pays(rt)
    keyed = as_(rt, "bob").pay.with_options(idempotency_key=KEY)
    with pytest.raises(Unauthorized) as refused:
        keyed.send(payer="alice", amount=900, note=SECRET)
    assert alice_id not in str(refused.value)
    with pytest.raises(Unauthorized):  # a keyed call waits for the same result
        keyed(payer="alice", amount=900, note=SECRET)
    assert count_rows(rt, "messages") == 1
    assert as_(rt, "landlord").snapshot()["balance"] == 900


def test_the_key_s_own_principal_and_the_owner_still_get_the_earlier_message(
    rt: Runtime,
) -> None:
    alice_id = alice_pays(rt)
    again = as_(rt, "alice").pay.with_options(idempotency_key=KEY)
    assert again.send(payer="alice", amount=900, note=SECRET).id == alice_id
    assert again(payer="alice", amount=900, note=SECRET) == 900
    with pytest.raises(IdempotencyConflict) as conflict:
        again.send(payer="alice", amount=1, note="other")
    assert SECRET in str(conflict.value)  # she may read her own payment
    assert conflict.value.existing is None
    owner = as_(rt, "landlord").pay.with_options(idempotency_key=KEY)
    assert owner.send(payer="alice", amount=900, note=SECRET).id == alice_id
    assert count_rows(rt, "messages") == 1


def test_the_async_face_refuses_the_same_way(db_url: str) -> None:
    async def scene() -> None:
        runtime = AsyncRuntime(db_url, **{**FAST, "authorize_message": policy})
        await runtime.install()
        async with runtime:
            ledger = runtime.ref(Ledger, "landlord")
            alice = ledger.with_options(authorization="alice").pay.with_options(
                idempotency_key=KEY
            )
            sent = await alice.send(payer="alice", amount=900, note=SECRET)
            assert await sent.wait(timeout=20) == 900
            bob = ledger.with_options(authorization="bob").pay.with_options(idempotency_key=KEY)
            with pytest.raises(Unauthorized) as refused:
                await bob.send(payer="alice", amount=900, note=SECRET)
            assert sent.id not in str(refused.value)
            with pytest.raises(Unauthorized) as other:
                await bob.send(payer="bob", amount=1, note="mine")
            assert SECRET not in str(other.value)

    asyncio.run(scene())


def test_a_missing_message_asks_the_policy_like_an_existing_one(rt: Runtime) -> None:
    alice_id = alice_pays(rt)
    missing = "0" * 32
    ASKED.clear()
    with pytest.raises(Unauthorized):
        rt.message(Ledger, alice_id, authorization="bob")
    with pytest.raises(Unauthorized) as refused:
        rt.message(Ledger, missing, authorization="bob")
    assert not isinstance(refused.value, MessageNotFound)
    assert [r.message_id for r in ASKED] == [alice_id, missing]

def test_a_key_given_to_the_ref_is_checked_like_one_given_to_the_operation(
    rt: Runtime,
) -> None:
    alice_pays(rt)
    bob = rt.ref(Ledger, "landlord").with_options(authorization="bob", idempotency_key=KEY)
    with pytest.raises(Unauthorized):
        bob.pay.send(payer="alice", amount=900, note=SECRET)
    with pytest.raises(Unauthorized) as refused:
        bob.pay(payer="bob", amount=1, note="mine")
    assert SECRET not in str(refused.value)
    assert count_rows(rt, "messages") == 1


def test_a_send_in_the_application_s_transaction_under_another_s_key_writes_nothing(
    rt: Runtime, db_url: str
) -> None:
    alice_id = alice_pays(rt)
    bob = as_(rt, "bob").pay.with_options(idempotency_key=KEY)
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            with pytest.raises(Unauthorized) as same:
                bob.with_options(connection=conn).send(payer="alice", amount=900, note=SECRET)
            with pytest.raises(Unauthorized) as other:
                bob.with_options(connection=conn).send(payer="bob", amount=1, note="mine")
            conn.commit()
    finally:
        engine.dispose()
    assert alice_id not in str(same.value) and SECRET not in str(other.value)
    assert other.value.__context__ is None
    assert count_rows(rt, "messages") == 1


def test_the_refusal_s_problem_details_and_log_records_name_nothing_of_the_message(
    rt: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    alice_id = alice_pays(rt)
    bob = as_(rt, "bob").pay.with_options(idempotency_key=KEY)
    refusals: list[Unauthorized] = []
    with caplog.at_level(logging.DEBUG, logger="solid_objects"):
        for payer, amount, note in (("alice", 900, SECRET), ("bob", 1, "mine")):
            with pytest.raises(Unauthorized) as refused:
                bob.send(payer=payer, amount=amount, note=note)
            refusals.append(refused.value)
    for exc in refusals:
        body = json.dumps(problems.document(exc))
        assert json.loads(body)["status"] == 403
        shown = body + str(exc) + repr(exc) + repr(vars(exc))
        assert alice_id not in shown and SECRET not in shown and "900" not in shown
    logged = "\n".join(f"{r.getMessage()} {vars(r)}" for r in caplog.records)
    assert alice_id not in logged and SECRET not in logged


def current_user(x_user: Annotated[str | None, Header()] = None) -> str | None:
    """Stands in for the application's authentication."""
    return x_user


LedgerRef = Annotated[
    AsyncRef[Ledger], Depends(actor(Ledger, path_param="ledger_id", context=current_user))
]


def payments(runtime: AsyncRuntime) -> FastAPI:
    """A web application that keys each payment by the request's Idempotency-Key."""
    app = FastAPI(lifespan=lifespan(runtime), exception_handlers=exception_handlers())

    @app.post("/ledgers/{ledger_id}/payments")
    async def pay(
        ledger: LedgerRef, keys: IdempotencyKeys, payer: str, amount: int, note: str
    ) -> dict[str, int]:
        return {"balance": await keys.keyed(ledger.pay)(payer=payer, amount=amount, note=note)}

    return app


def test_another_principal_s_http_retry_under_the_same_header_gets_a_bare_403(
    db_url: str,
) -> None:
    runtime = AsyncRuntime(db_url, **{**FAST, "authorize_message": policy})
    app = payments(runtime)
    key = {"Idempotency-Key": '"4f1c2b9e-0d7a-4e3b-9c51-6a8d2f0e7b13"'}
    query = {"payer": "alice", "amount": 900, "note": SECRET}
    with TestClient(app) as client:
        first = client.post(
            "/ledgers/landlord/payments", params=query, headers={**key, "x-user": "alice"}
        )
        assert first.json() == {"balance": 900}
        again = client.post(
            "/ledgers/landlord/payments", params=query, headers={**key, "x-user": "alice"}
        )
        assert again.json() == {"balance": 900}  # her own retry still runs once
        for params in (query, {"payer": "bob", "amount": 1, "note": "mine"}):
            refused = client.post(
                "/ledgers/landlord/payments", params=params, headers={**key, "x-user": "bob"}
            )
            assert (refused.status_code, refused.json()["code"]) == (403, "Unauthorized")
            assert SECRET not in refused.text and "900" not in refused.text
    with runtime.sync.store.read() as tx:
        assert tx.scalar("SELECT COUNT(*) FROM solid_messages") == 1


def test_the_async_face_refuses_a_keyed_call_and_asks_for_a_missing_id(db_url: str) -> None:
    async def scene() -> None:
        runtime = AsyncRuntime(db_url, **{**FAST, "authorize_message": policy})
        await runtime.install()
        async with runtime:
            ledger = runtime.ref(Ledger, "landlord")
            alice = ledger.with_options(authorization="alice", idempotency_key=KEY)
            assert await alice.pay(payer="alice", amount=900, note=SECRET) == 900
            bob = ledger.with_options(authorization="bob", idempotency_key=KEY)
            with pytest.raises(Unauthorized) as refused:
                await bob.pay(payer="bob", amount=1, note="mine")
            assert SECRET not in str(refused.value)
            with pytest.raises(Unauthorized):
                await bob.pay(payer="alice", amount=900, note=SECRET)
            assert await alice.pay(payer="alice", amount=900, note=SECRET) == 900
            missing = "f" * 32
            ASKED.clear()
            with pytest.raises(Unauthorized):
                await runtime.message(Ledger, missing, authorization="bob")
            assert [r.message_id for r in ASKED] == [missing]
            with runtime.sync.store.read() as tx:
                assert tx.scalar("SELECT COUNT(*) FROM solid_messages") == 1

    asyncio.run(scene())
