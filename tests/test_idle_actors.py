"""Idle actors: quiet actors, orphans of the application's data, per-type
message retention and opt-in expiry of idle instances. Runs on every backend.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from solid_objects import Actor, EffectContext, Runtime
from solid_objects.admin import Administration, ExpiryReport, Orphans, allow
from solid_objects.errors import ConfigurationError, InvalidArguments, Unauthorized

from .conftest import count_rows, db_now, statements_seen
from .test_processes import STEP, wait_until


class IdleSession(Actor):
    seen: int = 0

    def touch(self) -> int:
        self.seen += 1
        return self.seen

    def later(self) -> None:
        self.schedule(delay=timedelta(hours=1)).touch()

    def mail(self) -> None:
        self.emit("idle_mail")

    def fail(self) -> None:
        raise ValueError("boom")  # a dead letter once the attempts run out


class KeptInvoice(Actor):
    total: int = 0

    def add(self, n: int) -> int:
        self.total += n
        return self.total


def ops(rt: Runtime) -> Administration:
    rt.admin.set_policy(allow({"ops:*": "*", "viewer": "read"}))
    return rt.admin.as_principal("ops:alice")


def pause() -> None:
    """Let the database clock pass the last write (a cutoff of ``now`` is inclusive)."""
    time.sleep(0.02)


def ids(page: object) -> list[str]:
    return [a.actor_id for a in page.items]  # type: ignore[attr-defined]


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Runtime:
    return make_runtime(workers=0, max_attempts=1, state_ttl={"IdleSession": 0.01})


def busy_and_idle(rt: Runtime) -> None:
    """idle-a, idle-b quiet; the others each have one kind of pending work."""
    for name in ("idle-a", "idle-b", "paused", "queued", "delayed", "reminded", "effect"):
        rt.ref(IdleSession, name).touch.send()
    rt.testing.drain()
    ops(rt).pause_actor("IdleSession", "paused")
    rt.ref(IdleSession, "delayed").touch.with_options(delay=timedelta(hours=1)).send()
    rt.ref(IdleSession, "reminded").later.send()
    rt.ref(IdleSession, "effect").mail.send()
    rt.testing.drain()  # no handler for idle_mail here: the effect stays pending
    rt.ref(IdleSession, "queued").touch.send()
    pause()


def test_quiet_actors_have_no_pending_work_for_the_period(rt: Runtime) -> None:
    busy_and_idle(rt)
    admin = ops(rt)
    assert ids(admin.quiet_actors(timedelta(0), actor_type="IdleSession")) == ["idle-a", "idle-b"]
    assert ids(admin.quiet_actors(timedelta(hours=1))) == []  # touched just now
    future = datetime.fromtimestamp(db_now(rt) / 1000 + 60, UTC)
    assert ids(admin.quiet_actors(future)) == ["idle-a", "idle-b"]
    # the spelling, and paging
    first = admin.actors.quiet(since=timedelta(0), limit=1)
    assert ids(first) == ["idle-a"] and first.next_cursor is not None
    assert ids(admin.actors.quiet(since=timedelta(0), cursor=first.next_cursor)) == ["idle-b"]
    with pytest.raises(InvalidArguments, match="since"):
        admin.quiet_actors(3600)  # type: ignore[arg-type]
    with pytest.raises(InvalidArguments):
        admin.quiet_actors(timedelta(seconds=-1))
    other = admin.list_actors("IdleSession", limit=1).next_cursor  # another listing's cursor
    with pytest.raises(InvalidArguments):
        admin.quiet_actors(timedelta(0), cursor=other)
    rt.admin.set_policy(allow({"ops:*": ["actors.list"]}))
    with pytest.raises(Unauthorized, match=r"actors\.quiet"):
        admin.quiet_actors(timedelta(0))


def test_orphans_are_actors_whose_id_the_application_does_not_know(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    import solid_objects.admin.idle as idle

    monkeypatch.setattr(idle, "_SCAN", 2)  # several scans of the identity index
    for name in ("a", "b", "c", "d", "e"):
        rt.ref(KeptInvoice, name).add.send(n=1)
    rt.testing.drain()
    admin = ops(rt)
    owners = iter(["a", "c", "B"])  # any iterable; "B" is not "b"
    assert ids(admin.orphans("KeptInvoice", owners)) == ["b", "d", "e"]
    first = admin.actors.orphans("KeptInvoice", {"a", "c"}, limit=2)
    assert ids(first) == ["b", "d"]
    assert ids(admin.orphans("KeptInvoice", ["a", "c"], cursor=first.next_cursor)) == ["e"]
    assert ids(admin.orphans("KeptInvoice", ["a", "b", "c", "d", "e"])) == []
    assert admin.orphans() == Orphans(0, 0, 0)  # the old call, unchanged
    with pytest.raises(InvalidArguments, match="str"):
        admin.orphans("KeptInvoice", [1, 2])  # type: ignore[list-item]
    with pytest.raises(InvalidArguments, match="collection"):
        admin.orphans("KeptInvoice", "abc")
    with pytest.raises(InvalidArguments, match="both"):
        admin.orphans("KeptInvoice")  # type: ignore[call-overload]


def test_per_type_retention_keeps_a_types_messages_longer(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0, retention_by_type={"KeptInvoice": 3600})
    for n in range(3):
        rt.ref(KeptInvoice, "inv").add.send(n=n)
        rt.ref(IdleSession, "s").touch.send()
    rt.testing.drain()
    pause()
    admin = ops(rt)
    preview = admin.prune(timedelta(0), kinds=["messages"], dry_run=True)
    assert preview.rows == {"messages": 3}
    assert set(preview.cutoffs) == {"KeptInvoice"}
    assert admin.prune(timedelta(0), kinds=["messages"]).rows == {"messages": 3}
    assert count_rows(rt, "messages", "actor_type = 'KeptInvoice'") == 3
    assert count_rows(rt, "messages", "actor_type = 'IdleSession'") == 0
    # asking for more than the type keeps still deletes nothing younger than asked
    assert admin.prune(timedelta(hours=2), kinds=["messages"]).rows == {"messages": 0}
    audit = admin.audit_log().items
    assert audit[0].detail["cutoff_by_type"].keys() == {"KeptInvoice"}


def test_automatic_retention_by_type_alone(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime(workers=2, retention_by_type={"IdleSession": 0.2}, retention_interval=0.1)
    with rt:
        for _ in range(3):
            rt.ref(IdleSession, "auto").touch()
            rt.ref(KeptInvoice, "auto").add(n=1)
        wait_until(
            lambda: count_rows(rt, "messages", "actor_type = 'IdleSession'") == 0,
            STEP,
            "the IdleSession messages to be pruned",
        )
    assert count_rows(rt, "messages", "actor_type = 'KeptInvoice'") == 3  # no retention


def test_expiry_previews_then_deletes_only_idle_actors_of_opted_in_types(rt: Runtime) -> None:
    rt.ref(IdleSession, "dead").fail.send()
    rt.ref(KeptInvoice, "inv").add.send(n=1)  # no state_ttl: never expires
    busy_and_idle(rt)  # runs those too
    admin = ops(rt)
    viewer = rt.admin.as_principal("viewer")
    before = count_rows(rt, "actors")

    preview = viewer.expire_actors(dry_run=True)
    assert preview.dry_run and preview.actors == {"IdleSession": 2}
    assert set(preview.cutoffs) == {"IdleSession"}
    assert count_rows(rt, "actors") == before and count_rows(rt, "audit") == 1  # the pause
    with pytest.raises(Unauthorized, match=r"actors\.expire"):
        viewer.expire_actors()

    progress: list[tuple[str, int]] = []
    report = admin.actors.expire(progress=lambda t, n: progress.append((t, n)))
    assert isinstance(report, ExpiryReport) and report.actors == {"IdleSession": 2}
    assert progress == [("IdleSession", 2)]
    assert count_rows(rt, "actors") == before - 2
    left = {a.actor_id for a in admin.list_actors("IdleSession").items}
    assert left == {"paused", "queued", "delayed", "reminded", "effect", "dead"}
    expired = [e for e in admin.audit_log().items if e.action == "actors.expire"]
    assert sorted(e.actor_id for e in expired) == ["idle-a", "idle-b"]
    assert {e.principal for e in expired} == {"ops:alice"}
    # a new call starts a new, empty incarnation
    assert rt.ref(IdleSession, "idle-a").touch.send() is not None
    rt.testing.drain()
    assert rt.ref(IdleSession, "idle-a").snapshot() == {"seen": 1}


def test_expiry_checks_again_in_the_deleting_transaction(rt: Runtime) -> None:
    rt.ref(IdleSession, "raced").touch.send()
    rt.testing.drain()
    pause()
    store = rt.store
    cutoff = db_now(rt)
    with store.read() as tx:
        candidates = store.idle.expirable(tx, "IdleSession", cutoff, after=None, limit=10)
    assert [actor_id for _, actor_id in candidates] == ["raced"]
    rt.ref(IdleSession, "raced").touch.send()  # arrives between the scan and the delete
    assert store.transact(lambda tx: store.idle.expire(tx, cutoff, [candidates[0][0]])) == []
    rt.testing.drain()
    assert rt.ref(IdleSession, "raced").snapshot() == {"seen": 2}


def test_expiry_runs_as_many_statements_for_many_actors_as_for_few(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch is expired in a fixed number of statements: locks, checks, the delete
    and the audit records are each one statement for the batch, not one per actor."""

    def statements_to_expire(prefix: str, n: int) -> int:
        for i in range(n):
            rt.ref(IdleSession, f"{prefix}-{i}").touch.send()
        rt.testing.drain()
        pause()
        with statements_seen(monkeypatch, this_thread=False) as seen:
            report = ops(rt).expire_actors()
        assert report.actors == {"IdleSession": n}
        return len(seen)

    few = statements_to_expire("few", 2)
    many = statements_to_expire("many", 40)
    assert many <= few + 1, f"{few} statements for 2 actors, {many} for 40"
    expired = [e for e in ops(rt).audit_log(limit=100).items if e.action == "actors.expire"]
    assert len(expired) == 42 and len({e.actor_id for e in expired}) == 42


def test_expiry_is_opt_in_and_its_options_are_checked(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)
    rt.ref(IdleSession, "kept").touch.send()
    rt.testing.drain()
    pause()
    admin = ops(rt)
    assert admin.expire_actors().actors == {}
    with pytest.raises(InvalidArguments, match="opt-in"):
        admin.expire_actors(actor_type="IdleSession")
    assert count_rows(rt, "actors") == 1
    for bad in ({"IdleSession": 0}, {"": 5}, {"IdleSession": float("inf")}, ["IdleSession"]):
        with pytest.raises(ConfigurationError, match="state_ttl"):
            make_runtime(state_ttl=bad)
    with pytest.raises(ConfigurationError, match="retention_by_type"):
        make_runtime(retention_by_type={"KeptInvoice": -1})


def test_an_effect_handler_elsewhere_does_not_make_an_actor_quiet(rt: Runtime) -> None:
    """Done effects are history: an actor whose effect ran is quiet again."""
    ran: list[str] = []

    @rt.effect("idle_mail")
    def handler(ctx: EffectContext) -> None:
        ran.append(ctx.id)

    rt.ref(IdleSession, "mailer").mail.send()
    rt.testing.drain()
    pause()
    assert len(ran) == 1
    assert ids(ops(rt).quiet_actors(timedelta(0))) == ["mailer"]
