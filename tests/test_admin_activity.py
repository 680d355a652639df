"""``admin.activity`` (finished messages over time) and ``admin.actor_messages``.

Runs on every backend.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from solid_objects import Actor, Runtime
from solid_objects.admin import Activity, ActivityBucket, allow
from solid_objects.errors import InvalidArguments, NotFound, Unauthorized
from solid_objects.store import Tx

from .conftest import count_rows, db_now


class Counter(Actor):
    seen: list[int] = []

    def add(self, n: int) -> int:
        self.seen.append(n)
        return len(self.seen)

    def refuse(self) -> None:
        raise InvalidArguments("no")  # dead at the first attempt


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Runtime:
    runtime = make_runtime(workers=0)
    runtime.register(Counter)
    runtime.admin.set_policy(allow({"ops:*": "read", "other:*": ["actors.list"]}))
    return runtime


def _place(rt: Runtime, message_id: str, completed_at: int, latency: int, attempts: int) -> None:
    """Move a finished message in time: when it was sent and finished, how often tried."""

    def body(tx: Tx) -> None:
        tx.run(
            "UPDATE {messages} SET completed_at = :c, created_at = :s, attempts = :a "
            "WHERE id = :id",
            {"c": completed_at, "s": completed_at - latency, "a": attempts, "id": message_id},
        )

    rt.store.transact(body)


def _bucket_of(activity: Activity, at_ms: int) -> ActivityBucket:
    at = datetime.fromtimestamp(at_ms / 1000, activity.now.tzinfo if activity.now else None)
    step = timedelta(seconds=activity.bucket_seconds)
    (bucket,) = [b for b in activity.buckets if b.start and b.start <= at < b.start + step]
    return bucket


def test_activity_counts_finished_messages_per_bucket(rt: Runtime) -> None:
    counter = rt.ref(Counter, "c")
    done = [counter.add.send(n=n) for n in range(5)]
    dead = counter.refuse.send()
    rt.testing.drain()
    assert count_rows(rt, "messages", "status = 'completed'") == 5
    assert dead.status() == "dead"
    now = db_now(rt)
    # buckets start at whole multiples of their width: these land in known ones
    minute = now - now % 60_000
    two_ago, ten_ago, long_ago = minute - 120_000, minute - 600_000 + 59_999, now - 2 * 3600_000
    _place(rt, done[0].id, two_ago, latency=100, attempts=1)
    _place(rt, done[1].id, two_ago + 10, latency=300, attempts=3)
    _place(rt, done[2].id, two_ago + 20, latency=200, attempts=1)
    _place(rt, done[3].id, ten_ago, latency=50, attempts=2)
    _place(rt, done[4].id, long_ago, latency=7, attempts=1)  # outside the hour
    _place(rt, dead.id, two_ago + 30, latency=5, attempts=4)

    activity = rt.admin.as_principal("ops:a").activity(since_minutes=60, bucket_seconds=60)
    assert activity.bucket_seconds == 60
    assert len(activity.buckets) == 60
    assert [b.start for b in activity.buckets] == sorted(b.start for b in activity.buckets)
    assert not activity.latency_sampled
    # every bucket together: the four done and one dead in the hour, nothing older
    assert sum(b.completed for b in activity.buckets) == 4
    assert sum(b.dead for b in activity.buckets) == 1
    assert sum(b.retried for b in activity.buckets) == 3

    recent = _bucket_of(activity, two_ago)
    assert recent.start is not None and recent.start.timestamp() * 1000 == two_ago
    assert (recent.completed, recent.dead, recent.retried) == (3, 1, 2)
    assert recent.latency_p50_ms == 200 and recent.latency_p99_ms == 300
    assert recent.latency_mean_ms == 200 and recent.latency_max_ms == 300
    older = _bucket_of(activity, ten_ago)
    assert (older.completed, older.dead, older.retried) == (1, 0, 1)
    assert older.latency_p50_ms == older.latency_p99_ms == older.latency_mean_ms == 50
    quiet = [b for b in activity.buckets if b not in (recent, older)]
    assert all(b.completed == b.dead == 0 and b.latency_p50_ms is None for b in quiet)
    assert len(quiet) == 58

    # coarser buckets count the same messages
    wide = rt.admin.as_principal("ops:a").activity(since_minutes=180, bucket_seconds=3600)
    assert sum(b.completed for b in wide.buckets) == 5
    assert sum(b.dead for b in wide.buckets) == 1


def test_activity_is_authorized_as_status_and_checks_its_arguments(rt: Runtime) -> None:
    with pytest.raises(Unauthorized):
        rt.admin.as_principal("other:x").activity()
    with pytest.raises(Unauthorized):
        rt.admin.activity()  # no principal
    ops = rt.admin.as_principal("ops:a")
    for bad in (
        {"since_minutes": 0},
        {"since_minutes": True},
        {"since_minutes": 60, "bucket_seconds": 0},
        {"since_minutes": 60, "bucket_seconds": 3601},
        {"since_minutes": 7 * 24 * 60, "bucket_seconds": 60},  # too many buckets
    ):
        with pytest.raises(InvalidArguments):
            ops.activity(**bad)  # type: ignore[arg-type]


def test_actor_messages_newest_first_in_pages(rt: Runtime) -> None:
    counter = rt.ref(Counter, "c")
    sent = [counter.add.send(n=n) for n in range(5)]
    dead = counter.refuse.send()
    rt.testing.drain()
    queued = counter.add.send(n=99)  # not run: stays queued
    rt.ref(Counter, "other").add.send(n=1)
    ops = rt.admin.as_principal("ops:a")

    first = ops.actor_messages("Counter", "c", limit=4)
    assert [m.id for m in first.items] == [queued.id, dead.id, sent[4].id, sent[3].id]
    assert [m.status for m in first.items] == ["queued", "dead", "completed", "completed"]
    assert first.items[1].error["type"] == "InvalidArguments"
    assert first.items[2].arguments == {"n": 4} and first.items[2].completed_at is not None
    assert first.items[0].completed_at is None
    assert first.next_cursor is not None
    rest = ops.actor_messages("Counter", "c", limit=4, cursor=first.next_cursor)
    assert [m.id for m in rest.items] == [sent[2].id, sent[1].id, sent[0].id]
    assert rest.next_cursor is None

    with pytest.raises(Unauthorized):
        rt.admin.as_principal("other:x").actor_messages("Counter", "c")
    with pytest.raises(NotFound):
        ops.actor_messages("Counter", "nobody")
    with pytest.raises(InvalidArguments):
        ops.actor_messages("Counter", "c", cursor=ops.list_actors("Counter", limit=1).next_cursor)
