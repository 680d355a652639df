"""The administration API (``runtime.admin``): authorization, dead letters, actors, effects.

Runs on every backend.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, ClassVar

import pytest

from solid_objects import Actor, EffectContext, Rejected, Runtime
from solid_objects.admin import (
    ACTIONS,
    WRITE_ACTIONS,
    Action,
    Administration,
    NotFound,
    OperationRefused,
    allow,
)
from solid_objects.errors import InvalidArguments, MessageFailed, Unauthorized

from .conftest import count_rows

TABLES = ("actors", "messages", "effects", "reminders", "audit", "resolutions")


class Ledger(Actor):
    """``apply`` fails (retryably) for a tag in ``poisoned``: the process-local 'bug'."""

    poisoned: ClassVar[set[str]] = set()
    entries: list[str] = []

    def apply(self, tag: str) -> list[str]:
        if tag in Ledger.poisoned:
            raise ConnectionError(f"cannot apply {tag}")
        self.entries.append(tag)
        return list(self.entries)

    def refuse(self, why: str) -> None:
        raise InvalidArguments(why)  # deterministic: a dead letter at the first attempt

    def decline(self) -> None:
        raise Rejected("no", "rejected, not dead")

    def plan(self) -> None:
        self.emit("ship", box=1)
        self.schedule(delay=timedelta(hours=1), key="daily").apply(tag="reminded")


class Mailer:
    def __init__(self) -> None:
        self.down = True
        self.ids: list[str] = []

    def handler(self, ctx: EffectContext, to: str) -> None:
        self.ids.append(ctx.id)
        if self.down:
            raise ConnectionError(f"smtp down (call {len(self.ids)})")


class Notifier(Actor):
    sent: int = 0
    bounced: list[str] = []
    delivered: int = 0

    def notify(self, to: str) -> None:
        self.sent += 1
        self.emit("mail", to=to, on_failure="bounce", on_success="ok")

    def bounce(self, error: dict[str, Any]) -> None:
        self.bounced.append(error["message"])

    def ok(self) -> None:
        self.delivered += 1


@pytest.fixture(autouse=True)
def _reset() -> None:
    Ledger.poisoned.clear()


@pytest.fixture
def make_admin_runtime(make_runtime: Callable[..., Runtime]) -> Callable[..., Runtime]:
    def make(**options: Any) -> Runtime:
        rt = make_runtime(**options)
        rt.register(Ledger)
        return rt

    return make


def ops_of(rt: Runtime, principal: str = "ops:alice") -> Administration:
    rt.admin.set_policy(allow({"ops:*": "*"}))
    return rt.admin.as_principal(principal)


def snapshot(rt: Runtime) -> dict[str, list[Any]]:
    """Every row of every table: proof that nothing was written."""
    out: dict[str, list[Any]] = {}
    with rt.store.read() as tx:
        for table in TABLES:
            out[table] = sorted(
                (tuple(str(v) for v in row) for row in tx.rows(f"SELECT * FROM solid_{table}")),
            )
    return out


def dead_letter_of(rt: Runtime, message_id: str, timeout: float = 20.0) -> None:
    """Drain until ``message_id`` is dead (its retries wait out a short backoff)."""
    deadline = time.monotonic() + timeout
    while count_rows(rt, "messages", f"id = '{message_id}' AND status = 'dead'") == 0:
        assert time.monotonic() < deadline, f"message {message_id} never became a dead letter"
        rt.testing.drain()
        time.sleep(0.02)


# --- the operator's story --------------------------------------------------------------------


def test_poisoned_message_found_fixed_retried_then_later_messages_run_in_order(
    make_admin_runtime: Callable[..., Runtime],
) -> None:
    Ledger.poisoned.add("b")
    with make_admin_runtime(workers=2, max_attempts=3) as rt:
        ops = ops_of(rt)
        ledger = rt.ref(Ledger, "L1")
        ledger.apply.send(tag="a")
        poisoned = ledger.apply.send(tag="b")
        after = ledger.apply.send(tag="c")
        with pytest.raises(MessageFailed):
            poisoned.wait(timeout=20)
        assert after.wait(timeout=20) == ["a", "c"]  # the mailbox moved on past the dead letter

        # the operator sees it in the status, finds it, and reads why it died
        status = ops.status()
        (ledger_status,) = status.types
        assert (ledger_status.actor_type, ledger_status.dead_letters) == ("Ledger", 1)
        page = ops.list_dead_letters(actor_type="Ledger")
        (letter,) = page.items
        assert page.next_cursor is None
        assert (letter.id, letter.actor_id, letter.operation) == (poisoned.id, "L1", "apply")
        assert letter.arguments == {"tag": "b"}
        assert letter.attempts == 3
        assert letter.error["type"] == "ConnectionError"
        assert ops.get_dead_letter(poisoned.id) == letter
        assert ops.inspect_actor("Ledger", "L1").open_dead_letters == 1

        # fixes the cause, retries it; the retry goes to the tail of the mailbox
        Ledger.poisoned.clear()
        retried = ops.retry_dead_letter(poisoned.id, reason="rate table fixed")
        assert retried.message_id == poisoned.id and not retried.already
        later = ledger.apply.send(tag="d")
        assert later.wait(timeout=20) == ["a", "c", "b", "d"]
        assert rt.message(Ledger, retried.retry_message_id).wait(timeout=20) == ["a", "c", "b"]

    # the original message is still dead (its caller's outcome does not change) ...
    assert poisoned.status() == "dead"
    # ... but the dead letter is handled: not open any more, listed as retried
    assert ops.list_dead_letters().items == []
    (handled,) = ops.list_dead_letters(state="retried").items
    assert handled.resolution == "retried"
    assert handled.retry_message_id == retried.retry_message_id
    assert handled.resolved_by == "ops:alice" and handled.reason == "rate table fixed"
    assert ops.status().total.dead_letters == 0
    # one audit record says who did what, to which message
    (entry,) = ops.audit_log().items
    assert (entry.principal, entry.action, entry.target_kind, entry.target_id) == (
        "ops:alice",
        "dead_letters.retry",
        "message",
        poisoned.id,
    )
    assert (entry.actor_type, entry.actor_id) == ("Ledger", "L1")
    assert entry.detail["retry_message_id"] == retried.retry_message_id


def test_retry_is_idempotent_even_when_operators_race(
    make_admin_runtime: Callable[..., Runtime],
) -> None:
    rt = make_admin_runtime(workers=0)
    ops = ops_of(rt)
    dead = rt.ref(Ledger, "L").refuse.send(why="x")
    rt.testing.drain()
    first = ops.retry_dead_letter(dead.id)
    again = ops.retry_dead_letters([dead.id, dead.id])  # duplicates collapse
    assert [(r.retry_message_id, r.already) for r in again] == [(first.retry_message_id, True)]

    other = rt.ref(Ledger, "M").refuse.send(why="y")
    rt.testing.drain()
    barrier = threading.Barrier(6)
    results: list[str] = []
    errors: list[BaseException] = []

    def race() -> None:
        try:
            barrier.wait()
            results.append(ops.retry_dead_letter(other.id).retry_message_id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=race) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(set(results)) == 1
    for message_id in (dead.id, other.id):
        key = f"idempotency_key = 'dead-letter:{message_id}'"
        assert count_rows(rt, "messages", key) == 1
        assert count_rows(rt, "audit", f"target_id = '{message_id}'") == 1
        assert count_rows(rt, "resolutions", f"message_id = '{message_id}'") == 1


def test_unauthorized_calls_raise_and_write_nothing(
    make_admin_runtime: Callable[..., Runtime],
) -> None:
    rt = make_admin_runtime(workers=0)
    dead = rt.ref(Ledger, "L").refuse.send(why="x")
    rt.testing.drain()
    before = snapshot(rt)

    def every_call(admin: Administration) -> dict[str, Callable[[], Any]]:
        return {
            "status": admin.status,
            "actors.list": lambda: admin.list_actors("Ledger"),
            "actors.inspect": lambda: admin.inspect_actor("Ledger", "L"),
            "actors.history": lambda: admin.actor_history("Ledger", "L"),
            "actors.fork": lambda: admin.fork_actor("Ledger", "L", "L2"),
            "dead_letters.list": admin.list_dead_letters,
            "dead_letters.inspect": lambda: admin.get_dead_letter(dead.id),
            "dead_letters.retry": lambda: admin.retry_dead_letter(dead.id),
            "dead_letters.discard": lambda: admin.discard_dead_letter(dead.id),
            "effects.list": admin.list_effects,
            "effects.inspect": lambda: admin.get_effect("0" * 32),
            "effects.retry": lambda: admin.retry_effect("0" * 32),
            "audit.list": admin.audit_log,
            "actors.pending": admin.actors_with_pending_work,
            "actors.states": lambda: admin.actor_states("Ledger", ["L"]),
            "actors.pause": lambda: admin.pause_actor("Ledger", "L"),
            "actors.resume": lambda: admin.resume_actor("Ledger", "L"),
            "actors.destroy": lambda: admin.destroy_actor("Ledger", "L"),
            "actors.quiet": lambda: admin.quiet_actors(timedelta(days=1)),
            "actors.expire": admin.expire_actors,
            "messages.cancel": lambda: admin.cancel_message(dead.id),
            "orphans.list": admin.orphans,
            "reminders.list": admin.list_reminders,
            "reminders.pause": lambda: admin.pause_reminder("Ledger", "L", "apply"),
            "reminders.resume": lambda: admin.resume_reminder("Ledger", "L", "apply"),
            "reminders.cancel": lambda: admin.cancel_reminder("Ledger", "L", "apply"),
            "reminders.run_now": lambda: admin.run_reminder_now("Ledger", "L", "apply"),
            "processes.list": admin.list_processes,
            "processes.recover": lambda: admin.recover_process("nobody"),
            "retention.preview": lambda: admin.prune(timedelta(0), dry_run=True),
            "retention.prune": lambda: admin.prune(timedelta(0)),
        }

    assert set(every_call(rt.admin)) == ACTIONS

    # the default: no policy installed, and runtime.admin itself has no principal
    for call in every_call(rt.admin).values():
        with pytest.raises(Unauthorized, match="no principal"):
            call()
    for call in every_call(rt.admin.as_principal("ops:alice")).values():
        with pytest.raises(Unauthorized, match="default denies everything"):
            call()

    def broken(action: Action) -> bool:
        raise RuntimeError("policy bug")

    rt.admin.set_policy(broken)  # a policy that raises denies
    with pytest.raises(Unauthorized, match="policy bug"):
        rt.admin.as_principal("ops:alice").retry_dead_letter(dead.id)

    rt.admin.set_policy(allow({"ops:*": "read", "ops:root": "*"}))
    reader = rt.admin.as_principal("ops:bob")
    for name, call in every_call(reader).items():
        if name in WRITE_ACTIONS:
            with pytest.raises(Unauthorized, match="ops:bob may not " + name):
                call()
        else:
            try:
                call()
            except NotFound:
                pass  # allowed, and the effect id does not exist
    assert reader.allowed("status") and not reader.allowed("dead_letters.retry")
    assert rt.admin.as_principal("web:ops:root").allowed("status") is False
    assert snapshot(rt) == before  # nothing written by any refused call

    root = rt.admin.as_principal("ops:root")
    root.retry_dead_letter(dead.id)
    assert count_rows(rt, "audit") == 1


def test_policy_tables() -> None:
    policy = allow({"cli:*": "read", "cli:alice": ["dead_letters.*"], "svc": "*"})

    def ok(principal: str, name: str) -> bool:
        return policy(Action(principal, name))

    assert ok("cli:bob", "status") and ok("cli:bob", "actors.inspect")
    assert not ok("cli:bob", "dead_letters.retry")
    assert ok("cli:alice", "dead_letters.retry") and ok("cli:alice", "dead_letters.discard")
    assert not ok("cli:alice", "effects.retry")
    assert all(ok("svc", name) for name in ACTIONS)
    assert not ok("CLI:bob", "status")  # case-sensitive
    assert not ok("svc2", "status")
    with pytest.raises(ValueError, match="matches no administration action"):
        allow({"x": "dead_letter.retry"})


# --- dead letters ----------------------------------------------------------------------------


def test_discard_hides_a_dead_letter_and_forbids_retrying_it(
    make_admin_runtime: Callable[..., Runtime],
) -> None:
    rt = make_admin_runtime(workers=0)
    ops = ops_of(rt)
    first = rt.ref(Ledger, "L").refuse.send(why="one")
    second = rt.ref(Ledger, "L").refuse.send(why="two")
    rt.testing.drain()
    (discarded,) = ops.discard_dead_letters([first.id], reason="duplicate order")
    assert not discarded.already
    assert [d.id for d in ops.list_dead_letters().items] == [second.id]
    (shown,) = ops.list_dead_letters(state="discarded").items
    assert (shown.id, shown.resolution, shown.reason) == (first.id, "discarded", "duplicate order")
    assert ops.discard_dead_letter(first.id).already  # idempotent
    assert count_rows(rt, "audit") == 1

    before = snapshot(rt)
    with pytest.raises(OperationRefused, match="discarded"):
        ops.retry_dead_letters([second.id, first.id])  # one refused: none retried
    assert snapshot(rt) == before

    ops.retry_dead_letter(second.id)
    with pytest.raises(OperationRefused, match="already retried"):
        ops.discard_dead_letter(second.id)
    assert {d.id for d in ops.list_dead_letters(state="all").items} == {first.id, second.id}


def test_retrying_many_checks_every_id_first(make_admin_runtime: Callable[..., Runtime]) -> None:
    rt = make_admin_runtime(workers=0)
    ops = ops_of(rt)
    dead = [rt.ref(Ledger, f"L{i}").refuse.send(why=str(i)) for i in range(3)]
    fine = rt.ref(Ledger, "ok").apply.send(tag="fine")
    rejected = rt.ref(Ledger, "ok").decline.send()
    rt.testing.drain()
    before = snapshot(rt)
    with pytest.raises(NotFound, match="no message 'nope'"):
        ops.retry_dead_letters([dead[0].id, "nope"])
    with pytest.raises(OperationRefused, match="is completed, not a dead letter"):
        ops.retry_dead_letters([dead[0].id, fine.id])
    with pytest.raises(OperationRefused, match="is rejected, not a dead letter"):
        ops.retry_dead_letter(rejected.id)
    with pytest.raises(NotFound, match="is completed, not a dead letter"):
        ops.get_dead_letter(fine.id)
    with pytest.raises(InvalidArguments):
        ops.retry_dead_letters([])
    assert snapshot(rt) == before

    results = ops.retry_dead_letters([m.id for m in dead])
    assert [r.message_id for r in results] == [m.id for m in dead]
    assert count_rows(rt, "messages", "idempotency_key LIKE 'dead-letter:%'") == 3
    assert count_rows(rt, "audit", "action = 'dead_letters.retry'") == 3


def test_a_dead_letter_of_a_destroyed_actor_is_not_retried(
    make_admin_runtime: Callable[..., Runtime],
) -> None:
    rt = make_admin_runtime(workers=0)
    ops = ops_of(rt)
    dead = rt.ref(Ledger, "gone").refuse.send(why="x")
    rt.testing.drain()
    rt.ref(Ledger, "gone").destroy()
    rt.ref(Ledger, "gone").apply.send(tag="new incarnation")
    rt.testing.drain()
    before = snapshot(rt)
    with pytest.raises(OperationRefused, match="destroyed"):
        ops.retry_dead_letter(dead.id)
    assert snapshot(rt) == before


def test_listing_filters_and_pages_newest_first(make_admin_runtime: Callable[..., Runtime]) -> None:
    rt = make_admin_runtime(workers=0)
    ops = ops_of(rt)
    sent = []
    for i in range(7):
        ref = rt.ref(Ledger, f"L{i % 2}")
        sent.append(ref.refuse.send(why=str(i)))
        rt.testing.drain()  # one at a time: each dies after the previous one,
        time.sleep(0.003)  # in a later millisecond (deaths in one millisecond have no order)
    rt.ref(Ledger, "L0").apply.send(tag="ok")
    rt.testing.drain()

    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = ops.list_dead_letters(limit=3, cursor=cursor)
        seen.extend(d.id for d in page.items)
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
    assert pages == 3
    assert seen == [m.id for m in reversed(sent)]  # newest death first, no gaps, no repeats

    only_l1 = ops.list_dead_letters(actor_id="L1")
    assert [d.id for d in only_l1.items] == [m.id for m in reversed(sent) if m.actor_id == "L1"]
    assert ops.list_dead_letters(actor_type="Nope").items == []
    assert ops.list_dead_letters(operation="apply").items == []
    assert len(ops.list_dead_letters(actor_type="Ledger", operation="refuse").items) == 7
    with pytest.raises(InvalidArguments, match="cursor"):
        ops.list_dead_letters(cursor="garbage!")
    with pytest.raises(InvalidArguments, match="belongs to a actors listing"):
        ops.list_dead_letters(cursor=ops.list_actors("Ledger", limit=1).next_cursor)
    with pytest.raises(InvalidArguments, match="limit"):
        ops.list_dead_letters(limit=0)
    with pytest.raises(InvalidArguments, match="state"):
        ops.list_dead_letters(state="closed")


# --- actors ------------------------------------------------------------------------------------


def test_inspect_shows_state_mailbox_lease_effects_and_reminders(
    make_admin_runtime: Callable[..., Runtime],
) -> None:
    rt = make_admin_runtime(workers=0)
    ops = ops_of(rt)
    ledger = rt.ref(Ledger, "L")
    ledger.apply.send(tag="first")
    ledger.plan.send()  # stages an effect nobody handles here, and a reminder
    rt.testing.drain()
    queued = [ledger.apply.send(tag="q1"), ledger.apply.send(tag="q2")]
    delayed = ledger.apply.with_options(delay=3600).send(tag="later")
    with rt.store.read() as tx:
        pk, generation = tx.row(
            "SELECT pk, lease_generation FROM solid_actors WHERE actor_id = 'L'"
        )
    # a worker elsewhere claims it (and, say, is running the head message now)
    assert rt.store.transact(
        lambda tx: rt.store.leases.claim(tx, pk, generation, "9-worker", 30_000)
    )

    detail = ops.inspect_actor("Ledger", "L")
    assert detail.state == {"entries": ["first"]}
    assert (detail.done_seq, detail.next_seq, detail.queued_total) == (2, 5, 2)
    assert [(m.id, m.seq, m.operation, m.arguments, m.status) for m in detail.queued] == [
        (queued[0].id, 3, "apply", {"tag": "q1"}, "queued"),
        (queued[1].id, 4, "apply", {"tag": "q2"}, "queued"),
    ]
    assert detail.attempt == 1
    assert detail.lease is not None
    assert (detail.lease.owner, detail.lease.expired) == ("9-worker", False)
    assert detail.lease.expires_at is not None and detail.now is not None
    assert timedelta(seconds=20) < detail.lease.expires_at - detail.now <= timedelta(seconds=30)
    assert [(m.id, m.status, m.seq) for m in detail.scheduled] == [(delayed.id, "scheduled", None)]
    (effect,) = detail.effects
    assert (effect.name, effect.status, effect.arguments) == ("ship", "pending", {"box": 1})
    (reminder,) = detail.reminders
    assert (reminder.operation, reminder.key, reminder.arguments) == (
        "apply",
        "daily",
        {"tag": "reminded"},
    )
    assert ops.inspect_actor("Ledger", "L", limit=1).queued == detail.queued[:1]

    status = ops.status().total
    assert (status.queued, status.scheduled, status.effects_pending, status.reminders) == (
        2,
        1,
        1,
        1,
    )
    assert (status.leases_held, status.leases_expired) == (1, 0)
    with pytest.raises(NotFound, match="no actor Ledger 'nobody'"):
        ops.inspect_actor("Ledger", "nobody")


def test_actors_list_by_type_with_pages(make_admin_runtime: Callable[..., Runtime]) -> None:
    rt = make_admin_runtime(workers=0)
    ops = ops_of(rt)
    for name in ["b", "a", "c", "B"]:
        rt.ref(Ledger, name).apply.send(tag="x")
    rt.ref(Ledger, "c").apply.send(tag="y")
    rt.testing.drain()
    rt.ref(Ledger, "c").apply.send(tag="z")
    first = ops.list_actors("Ledger", limit=3)
    rest = ops.list_actors("Ledger", limit=3, cursor=first.next_cursor)
    assert [a.actor_id for a in first.items] + [a.actor_id for a in rest.items] == [
        "B",
        "a",
        "b",
        "c",
    ]
    assert rest.next_cursor is None
    assert [a.queued for a in rest.items] == [1]
    assert ops.list_actors("Other").items == []


# --- effects -------------------------------------------------------------------------------------


def test_dead_effect_listed_retried_with_attempts_reset_and_the_same_id(
    make_admin_runtime: Callable[..., Runtime],
) -> None:
    mailer = Mailer()
    rt = make_admin_runtime(workers=0, effect_max_attempts=1)
    rt.register(Notifier)
    rt.effect("mail")(mailer.handler)
    ops = ops_of(rt)
    notifier = rt.ref(Notifier, "n")
    notifier.notify.send(to="ops@example.com")
    rt.testing.drain()
    (dead,) = ops.list_effects().items
    assert (dead.name, dead.status, dead.attempts) == ("mail", "dead", 1)
    assert dead.error["message"] == "smtp down (call 1)"
    assert notifier.snapshot()["bounced"] == ["smtp down (call 1)"]
    assert ops.status().total.effects_dead == 1
    assert ops.list_effects(status="pending").items == []
    assert ops.get_effect(dead.id) == dead

    # retried while the cause persists: it dies again, and the actor hears of it again
    assert not ops.retry_effect(dead.id).already
    rt.testing.drain()
    assert ops.get_effect(dead.id).status == "dead"
    assert notifier.snapshot()["bounced"] == ["smtp down (call 1)", "smtp down (call 2)"]

    mailer.down = False
    retried = ops.retry_effect(dead.id)
    assert (retried.status, retried.already) == ("pending", False)
    assert ops.retry_effect(dead.id).already  # still pending: nothing changes
    assert ops.get_effect(dead.id).attempts == 0
    rt.testing.drain()
    assert ops.get_effect(dead.id).status == "done"
    assert notifier.snapshot()["delivered"] == 1
    assert mailer.ids == [dead.id] * 3  # the handler saw the same ctx.id every time
    with pytest.raises(OperationRefused, match="is done"):
        ops.retry_effect(dead.id)
    with pytest.raises(NotFound):
        ops.retry_effects(["f" * 32])
    assert count_rows(rt, "audit", "action = 'effects.retry'") == 2


@pytest.mark.parametrize("bad", ["\udcff", "bad\x00", ""])
def test_listing_filters_are_checked_like_ids(
    make_admin_runtime: Callable[..., Runtime], bad: str
) -> None:
    ops = ops_of(make_admin_runtime(workers=0))
    for call in (
        lambda: ops.list_dead_letters(actor_type=bad),
        lambda: ops.list_dead_letters(actor_id=bad),
        lambda: ops.list_dead_letters(operation=bad),
        lambda: ops.list_effects(actor_type=bad),
        lambda: ops.list_effects(name=bad),
        lambda: ops.audit_log(target_id=bad),
        lambda: ops.audit_log(principal=bad),
    ):
        with pytest.raises(InvalidArguments):
            call()
