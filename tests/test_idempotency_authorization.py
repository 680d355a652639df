"""An idempotency key shows the message stored under it only to a caller who may read
that message; a missing message id costs the policy's time like a refused one.

The scene, on every backend: anyone may pay into the landlord's account, but a stored
payment may be read only by the account's owner or by its payer. Alice pays the rent
under her key; Bob, who guessed or overheard the key, reuses it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from solid_objects import Actor, AsyncRuntime, AuthorizationRequest, Runtime
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
