"""Per-call policies: a denied call raises Unauthorized before the database is touched."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from solid_objects import Actor, AsyncRuntime, Runtime, query
from solid_objects.admin.policy import allow
from solid_objects.authorization import AuthorizationRequest
from solid_objects.doctor import Check
from solid_objects.errors import (
    ConfigurationError,
    MessageNotFound,
    SchemaNotInstalled,
    Unauthorized,
)
from solid_objects.ref import MessageReference
from solid_objects.store.schema import build_metadata

from .conftest import FAST


class Cart(Actor):
    items: list[str] = []

    def add(self, item: str, quantity: int = 1) -> int:
        self.items.extend([item] * quantity)
        return len(self.items)

    async def add_async(self, item: str) -> int:
        self.items.append(item)
        return len(self.items)

    @query
    def count(self) -> int:
        return len(self.items)


class Wallet(Actor):
    balance: int = 0

    def add(self, item: str, quantity: int = 1) -> int:
        return quantity


def row_counts(runtime: Runtime) -> dict[str, int]:
    """Every row of every library table, so "wrote nothing" covers them all."""
    tables = build_metadata(runtime.options.table_prefix).tables
    with runtime.store.read() as tx:
        return {name: int(tx.scalar(f"SELECT COUNT(*) FROM {name}")) for name in tables}


def owner_only(request: AuthorizationRequest) -> bool:
    """Users may touch only the carts named after them."""
    return request.context is not None and request.actor_id == f"cart-{request.context}"


def test_message_policy_denies_calls_and_sends_writing_nothing(
    make_runtime: Callable[..., Runtime],
) -> None:
    seen: list[AuthorizationRequest] = []

    def policy(request: AuthorizationRequest) -> bool:
        seen.append(request)
        return owner_only(request)

    rt = make_runtime(authorize_message=policy)
    with rt:
        mine = rt.ref(Cart, "cart-alice").with_options(authorization="alice")
        assert mine.add(item="apple", quantity=2) == 2  # also warms the actor here
        assert seen[-1] == AuthorizationRequest(
            "message", "alice", "Cart", "cart-alice", "add", {"item": "apple", "quantity": 2}
        )
        before = row_counts(rt)
        theirs = rt.ref(Cart, "cart-alice").with_options(authorization="mallory")
        anonymous = rt.ref(Cart, "cart-alice")
        attempts: list[Callable[[], Any]] = [
            lambda: theirs.add(item="x"),
            lambda: theirs.add.send(item="x"),
            lambda: theirs.add.with_options(idempotency_key="k").send(item="x"),
            lambda: theirs.add.with_options(idempotency_key="k")(item="x"),
            lambda: theirs.add.with_options(delay=5).send(item="x"),
            lambda: theirs.call(Cart.add, item="x"),
            lambda: theirs.send(Cart.add, item="x"),
            lambda: theirs.add_async(item="x"),
            lambda: anonymous.add(item="x"),
            # the context can be given per operation, too, and the last one given counts
            lambda: anonymous.add.with_options(authorization="mallory")(item="x"),
            lambda: mine.add.with_options(authorization="mallory").send(item="x"),
        ]
        for attempt in attempts:
            with pytest.raises(Unauthorized, match="not allowed"):
                attempt()
        assert row_counts(rt) == before
        assert rt.ref(Cart, "cart-alice").count() == 2  # queries have no policy: trusted
        handle = rt.ref(Cart, "cart-alice").add.with_options(authorization="alice")
        assert handle.send(item="pear").wait() == 3


def test_query_policy_covers_queries_and_snapshots(make_runtime: Callable[..., Runtime]) -> None:
    seen: list[AuthorizationRequest] = []

    def policy(request: AuthorizationRequest) -> bool:
        seen.append(request)
        return owner_only(request)

    rt = make_runtime(authorize_query=policy)
    with rt:
        rt.ref(Cart, "cart-bob").add(item="tea")  # messages have no policy: trusted
        before = row_counts(rt)
        other = rt.ref(Cart, "cart-bob").with_options(authorization="mallory")
        for attempt in (other.count, other.snapshot, lambda: other.call(Cart.count)):
            with pytest.raises(Unauthorized):
                attempt()
        assert row_counts(rt) == before
        bob = rt.ref(Cart, "cart-bob").with_options(authorization="bob")
        assert bob.count() == 1
        assert seen[-1] == AuthorizationRequest("query", "bob", "Cart", "cart-bob", "count", {})
        assert bob.snapshot() == {"items": ["tea"]}
        assert seen[-1] == AuthorizationRequest("query", "bob", "Cart", "cart-bob", None, {})


def test_denied_destroy_cannot_tell_a_missing_actor_from_an_existing_one(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(authorize_destroy=owner_only)
    with rt:
        intruder = rt.ref(Cart, "cart-carol").with_options(authorization="mallory")
        with pytest.raises(Unauthorized) as missing:
            intruder.destroy()
        rt.ref(Cart, "cart-carol").add(item="milk")
        before = row_counts(rt)
        with pytest.raises(Unauthorized) as existing:
            intruder.destroy()
        assert str(existing.value) == str(missing.value)
        assert row_counts(rt) == before
        assert rt.ref(Cart, "cart-carol").count() == 1
        assert rt.ref(Cart, "cart-carol").with_options(authorization="carol").destroy() is True


def test_the_check_runs_before_any_database_access(db_url: str) -> None:
    """On a database with no tables at all, a denied call is Unauthorized, not a schema error."""
    rt = Runtime(db_url, workers=0, authorize_message=owner_only, authorize_query=owner_only)
    try:
        ref = rt.ref(Cart, "cart-dave").with_options(authorization="mallory")
        for attempt in (lambda: ref.add.send(item="x"), ref.count, ref.snapshot):
            with pytest.raises(Unauthorized):
                attempt()
        with pytest.raises(SchemaNotInstalled):  # an allowed one gets as far as the database
            rt.ref(Cart, "cart-dave").with_options(authorization="dave").snapshot()
    finally:
        rt.close()


def test_defaults_trust_in_process_calls_and_deny_subscriptions(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime()
    with rt:
        ref = rt.ref(Cart, "c").with_options(authorization="anyone")
        assert ref.add(item="x") == 1
        assert ref.count() == 1
        assert ref.destroy() is True
        with pytest.raises(Unauthorized, match="authorize_subscription"):
            rt.kernel.client.access.authorize("subscription", "anyone", "Cart", "c")
    allowing = make_runtime(authorize_subscription=lambda request: request.context == "ok")
    allowing.kernel.client.access.authorize("subscription", "ok", "Cart", "c")
    with pytest.raises(Unauthorized):
        allowing.kernel.client.access.authorize("subscription", "no", "Cart", "c")


def test_only_true_allows_and_a_failing_policy_denies(
    make_runtime: Callable[..., Runtime],
) -> None:
    def broken(request: AuthorizationRequest) -> bool:
        raise KeyError("user")

    for policy in (broken, lambda request: "yes", lambda request: 1, lambda request: None):
        rt = make_runtime(authorize_message=policy)
        with rt:
            before = row_counts(rt)
            with pytest.raises(Unauthorized):
                rt.ref(Cart, "c").add.send(item="x")
            assert row_counts(rt) == before


def test_policies_are_checked_when_the_runtime_is_built(db_url: str) -> None:
    async def async_policy(request: AuthorizationRequest) -> bool:
        return True

    with pytest.raises(ConfigurationError, match="authorize_query must be a callable"):
        Runtime(db_url, authorize_query="yes")
    with pytest.raises(ConfigurationError, match="AsyncRuntime"):
        Runtime(db_url, authorize_message=async_policy)


def test_a_sync_policy_returning_an_awaitable_is_refused_on_the_sync_face(
    make_runtime: Callable[..., Runtime],
) -> None:
    class Sneaky:
        async def __call__(self, request: AuthorizationRequest) -> bool:
            return True

    rt = make_runtime(authorize_message=Sneaky())
    with rt:
        before = row_counts(rt)
        with pytest.raises(ConfigurationError, match="async policies need AsyncRuntime"):
            rt.ref(Cart, "c").add.send(item="x")
        assert row_counts(rt) == before


def test_async_policies_on_the_async_face(db_url: str) -> None:
    seen: list[AuthorizationRequest] = []

    async def policy(request: AuthorizationRequest) -> bool:
        await asyncio.sleep(0)  # runs on the caller's loop
        seen.append(request)
        return owner_only(request)

    async def main() -> None:
        runtime = AsyncRuntime(
            db_url,
            workers=2,
            **FAST,
            authorize_message=policy,
            authorize_query=policy,
            authorize_destroy=owner_only,  # a sync policy works on the async face too
        )
        await runtime.install()
        async with runtime:
            mine = runtime.ref(Cart, "cart-erin").with_options(authorization="erin")
            assert await mine.add(item="a") == 1
            assert await (await mine.add.send(item="b")).wait() == 2
            assert await mine.call(Cart.add_async, item="c") == 3
            assert await mine.count() == 3
            assert await mine.snapshot() == {"items": ["a", "b", "c"]}
            before = row_counts(runtime.sync)
            theirs = runtime.ref(Cart, "cart-erin").with_options(authorization="mallory")
            for attempt in (
                lambda: theirs.add(item="x"),
                lambda: theirs.add.send(item="x"),
                lambda: theirs.add.with_options(idempotency_key="k").send(item="x"),
                lambda: mine.add.with_options(authorization="mallory")(item="x"),
                theirs.count,
                theirs.snapshot,
                theirs.destroy,
            ):
                with pytest.raises(Unauthorized):
                    await attempt()
            assert row_counts(runtime.sync) == before
            assert {r.kind for r in seen} == {"message", "query"}
            assert await mine.destroy() is True

    asyncio.run(main())


def test_message_references_are_authorized_again_when_read(
    make_runtime: Callable[..., Runtime],
) -> None:
    seen: list[AuthorizationRequest] = []

    def policy(request: AuthorizationRequest) -> bool:
        seen.append(request)
        return owner_only(request)

    rt = make_runtime(authorize_message=policy)
    with rt:
        sent = rt.ref(Cart, "cart-alice").with_options(authorization="alice").add.send(item="a")
        assert sent.wait() == 1
        again = rt.message(Cart, sent.id, authorization="alice")
        assert (again.status(), again.result(), again.wait()) == ("completed", 1, 1)
        assert seen[-1] == AuthorizationRequest(
            "message", "alice", "Cart", "cart-alice", "add", {"item": "a"}, sent.id
        )
        stolen = sent.with_options(authorization="mallory")
        for attempt in (stolen.status, stolen.result, stolen.wait):
            with pytest.raises(Unauthorized) as denied:
                attempt()
            assert "cart-alice" not in str(denied.value)  # whose message it is stays hidden
        with pytest.raises(Unauthorized):
            rt.message(Cart, sent.id, authorization="mallory")
        with pytest.raises(Unauthorized):
            rt.message(Cart, sent.id)  # no context at all

        # A forged reference: mallory claims the message is her own cart's.
        add = rt.registry.register(Cart).operations["add"]
        forged = MessageReference(rt, sent.id, add, "Cart", "cart-mallory", authorization="mallory")
        for attempt in (forged.status, forged.result, forged.wait):
            with pytest.raises(Unauthorized):
                attempt()
        # A foreign type, and an id that does not exist: refused like a denied read.
        missing = "0" * 32
        with pytest.raises(Unauthorized) as foreign:
            rt.message(Wallet, sent.id, authorization="mallory")
        with pytest.raises(Unauthorized) as absent:
            rt.message(Wallet, missing, authorization="mallory")
        assert str(absent.value) == str(foreign.value).replace(sent.id, missing)
        with pytest.raises(Unauthorized):
            rt.message(Cart, missing, authorization="alice")
        probe = MessageReference(rt, missing, add, "Cart", "cart-alice", authorization="alice")
        with pytest.raises(Unauthorized):
            probe.status()


def test_without_a_policy_a_reference_must_still_match_its_message(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime()
    with rt:
        sent = rt.ref(Cart, "c1").add.send(item="a")
        assert rt.message(Cart, sent.id).wait() == 1
        with pytest.raises(MessageNotFound):
            rt.message(Wallet, sent.id)
        with pytest.raises(MessageNotFound):
            rt.message(Cart, "0" * 32)
        add = rt.registry.register(Cart).operations["add"]
        count = rt.registry.register(Cart).operations["count"]
        for forged in (
            MessageReference(rt, sent.id, add, "Cart", "c2"),
            MessageReference(rt, sent.id, count, "Cart", "c1"),
            MessageReference(rt, sent.id, add, "Wallet", "c1"),
        ):
            for attempt in (forged.status, forged.result, forged.wait):
                with pytest.raises(Unauthorized, match="does not match"):
                    attempt()


def test_async_message_references_are_authorized_again_when_read(db_url: str) -> None:
    async def policy(request: AuthorizationRequest) -> bool:
        await asyncio.sleep(0)
        return owner_only(request)

    async def main() -> None:
        runtime = AsyncRuntime(db_url, workers=2, **FAST, authorize_message=policy)
        await runtime.install()
        async with runtime:
            mine = runtime.ref(Cart, "cart-erin").with_options(authorization="erin")
            sent = await mine.add.send(item="a")
            assert await sent.wait() == 1
            again = await runtime.message(Cart, sent.id, authorization="erin")
            assert await again.result() == 1
            stolen = sent.with_options(authorization="mallory")
            for attempt in (stolen.status, stolen.result, stolen.wait):
                with pytest.raises(Unauthorized):
                    await attempt()
            with pytest.raises(Unauthorized):
                await runtime.message(Cart, sent.id, authorization="mallory")

    asyncio.run(main())


def posture(runtime: Runtime) -> Check:
    (check,) = [c for c in runtime.doctor(round_trip=False).checks if c.name == "authorization"]
    return check


def test_doctor_reports_the_posture_and_warns_when_a_surface_is_open_to_everyone(
    make_runtime: Callable[..., Runtime],
) -> None:
    default = posture(make_runtime())
    assert default.status == "ok"
    assert default.detail == (
        "message: trusted (no policy); query: trusted (no policy); destroy: trusted "
        "(no policy); subscription: denied (no policy); administration: denied (no policy)"
    )

    guarded = make_runtime(authorize_message=owner_only, authorize_subscription=owner_only)
    guarded.admin.set_policy(allow({"cli:alice": "*"}))
    check = posture(guarded)
    assert check.status == "ok", check
    assert "message: policy owner_only" in check.detail
    assert "subscription: policy owner_only" in check.detail
    assert "administration: policy allow(" in check.detail

    def everyone(request: AuthorizationRequest) -> bool:
        return True

    def broken(request: AuthorizationRequest) -> bool:
        raise RuntimeError("no user")

    wide = make_runtime(authorize_subscription=everyone, authorize_query=broken)
    wide.admin.set_policy(allow({"*": "read"}))
    check = posture(wide)
    assert check.status == "warn"
    assert "open to everyone: authorize_subscription, runtime.admin.set_policy" in check.detail
    assert check.advice is not None and "docs/security.md" in check.advice


def test_async_doctor_asks_async_policies(db_url: str) -> None:
    async def everyone(request: AuthorizationRequest) -> bool:
        await asyncio.sleep(0)
        return True

    async def main() -> None:
        runtime = AsyncRuntime(db_url, workers=0, authorize_message=everyone)
        await runtime.install()
        try:
            report = await runtime.doctor(round_trip=False)
        finally:
            await runtime.close()
        (check,) = [c for c in report.checks if c.name == "authorization"]
        assert check.status == "warn"
        assert "message: policy test_async_doctor_asks_async_policies.<locals>.everyone" in (
            check.detail
        )
        assert "open to everyone: authorize_message" in check.detail

    asyncio.run(main())
