"""Commits that fail: names that cannot be stored, a commit the database always
refuses, and a turn that outlasts its lease.

A definition whose names do not fit their columns is refused when the class is
defined. A turn whose commit the database refuses (a trigger, a constraint) uses up
its attempts with backoff and becomes a dead letter; it never blocks or fails other
callers' work that shared its batch. A turn that keeps losing its lease backs off and
becomes a dead letter that says to raise ``lease_duration``.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from solid_objects import Actor, EffectContext, Runtime
from solid_objects.actor import definition_of
from solid_objects.codec import MAX_ID_LENGTH, MAX_OPERATION_LENGTH, MAX_TYPE_LENGTH
from solid_objects.errors import DatabaseError, InvalidActorDefinition, MessageFailed
from solid_objects.store import Tx
from solid_objects.store.schema import build_metadata
from solid_objects.store.writer import EnqueueBatcher

from .conftest import count_rows
from .test_storage_faults import fill, integrity, small_disk

__all__ = ["small_disk"]  # a fixture, used by name

LONG = "o" * MAX_OPERATION_LENGTH


# --- 12.10: names that cannot be stored are refused at definition -----------------------


def test_an_operation_name_longer_than_its_column_is_refused_when_the_class_is_defined() -> None:
    with pytest.raises(InvalidActorDefinition, match=r"141 characters.*at most 128"):
        type("TooLong", (Actor,), {"p" + "x" * 140: lambda self: None})
    fits = type("FitsExactly", (Actor,), {LONG: lambda self: None})
    assert LONG in definition_of(fits).operations


#: Every column that stores a name taken from a definition or a registration, with the
#: limit the library checks before anything is written.
IDENTIFIER_COLUMNS = {
    ("actors", "actor_type"): MAX_TYPE_LENGTH,
    ("actors", "actor_id"): MAX_ID_LENGTH,
    ("messages", "actor_type"): MAX_TYPE_LENGTH,
    ("messages", "actor_id"): MAX_ID_LENGTH,
    ("messages", "operation"): MAX_OPERATION_LENGTH,
    ("messages", "idempotency_key"): MAX_ID_LENGTH,
    ("effects", "actor_type"): MAX_TYPE_LENGTH,
    ("effects", "actor_id"): MAX_ID_LENGTH,
    ("effects", "name"): MAX_ID_LENGTH,
    ("effects", "on_success"): MAX_OPERATION_LENGTH,
    ("effects", "on_failure"): MAX_OPERATION_LENGTH,
    ("reminders", "operation"): MAX_OPERATION_LENGTH,
    ("reminders", "rkey"): MAX_ID_LENGTH,
    ("reminders", "actor_type"): MAX_TYPE_LENGTH,
    ("reminders", "actor_id"): MAX_ID_LENGTH,
}


def test_every_stored_identifier_column_is_as_wide_as_the_check_that_guards_it() -> None:
    md = build_metadata("solid_")
    for (table, column), limit in IDENTIFIER_COLUMNS.items():
        width = md.tables[f"solid_{table}"].c[column].type.length
        assert width == limit, (table, column, width, limit)


def _start(self: Any) -> None:
    getattr(self.schedule(delay=0), LONG)()
    self.emit("ping", on_success=LONG)
    getattr(self.send_to(Longest, "other"), LONG)()


def _longest(self: Any, effect_id: str = "") -> int:
    self.seen.append("effect" if effect_id else "call")
    return len(self.seen)


#: An actor whose operation name is as long as the column allows.
Longest: Any = type(
    "Longest",
    (Actor,),
    {"__annotations__": {"seen": list[str]}, "seen": [], "start": _start, LONG: _longest},
)


def test_the_longest_operation_name_that_is_accepted_is_stored_everywhere(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=0)

    @rt.effect("ping")
    def ping(ctx: EffectContext) -> None:
        pass

    a = rt.ref(Longest, "a")
    a.start.send()
    getattr(a, LONG).send()
    rt.testing.drain()
    rt.testing.drain()
    assert sorted(a.snapshot()["seen"]) == ["call", "call", "effect"]
    assert rt.ref(Longest, "other").snapshot()["seen"] == ["call"]
    assert count_rows(rt, "messages", "status = 'completed'") == 5


# --- 12.10 and 21: a commit the database always refuses ------------------------------------


class Tally(Actor):
    n: int = 0

    def add(self) -> int:
        self.n += 1
        return self.n


class Poison(Actor):
    """Its turn schedules a reminder that a trigger refuses: its commit always fails."""

    runs: int = 0

    def arm(self) -> None:
        self.runs += 1
        self.schedule(delay=3600, key="poison").arm()

    def touch(self) -> None:
        pass


def refuse(runtime: Runtime, name: str, table: str, event: str, condition: str) -> None:
    """A trigger on ``solid_<table>`` that refuses a row matching ``condition`` (SQL over
    ``NEW`` and ``OLD``), as an application's trigger would."""
    text = f"{name} refused"
    statements = {
        "sqlite": [
            f"CREATE TRIGGER {name} BEFORE {event} ON solid_{table} WHEN {condition} "
            f"BEGIN SELECT RAISE(ABORT, '{text}'); END"
        ],
        "postgresql": [
            f"CREATE FUNCTION {name}() RETURNS trigger AS $$ BEGIN "
            f"IF {condition} THEN RAISE EXCEPTION '{text}'; END IF; "
            "RETURN NEW; END $$ LANGUAGE plpgsql",
            f"CREATE TRIGGER {name} BEFORE {event} ON solid_{table} "
            f"FOR EACH ROW EXECUTE FUNCTION {name}()",
        ],
        "mysql": [
            f"CREATE TRIGGER {name} BEFORE {event} ON solid_{table} FOR EACH ROW "
            f"BEGIN IF {condition} THEN SIGNAL SQLSTATE '45000' "
            f"SET MESSAGE_TEXT = '{text}'; END IF; END"
        ],
    }[runtime.engine.dialect.name]
    with runtime.engine.begin() as conn:
        for statement in statements:
            conn.exec_driver_sql(statement)


def refuse_poison_reminders(runtime: Runtime) -> None:
    refuse(runtime, "poison_reminder", "reminders", "INSERT", "NEW.rkey = 'poison'")


@pytest.mark.timeout(180)
def test_a_commit_the_database_always_refuses_fails_alone_and_becomes_a_dead_letter(
    make_runtime: Callable[..., Runtime],
) -> None:
    """One actor's turns are refused at every commit while 8 threads call and send to 20
    other actors: no other call raises, each committed exactly once, and every poison
    message is a dead letter after exactly ``max_attempts`` attempts."""
    rt = make_runtime(workers=4, max_attempts=3)
    refuse_poison_reminders(rt)
    rt.start()
    poison = rt.ref(Poison, "p")
    poisoned = [poison.arm.send() for _ in range(6)]
    tallies = [rt.ref(Tally, f"t{i}") for i in range(20)]
    succeeded = [0] * 20
    lock = threading.Lock()
    errors: list[BaseException] = []
    sends: list[Any] = []
    stop = time.monotonic() + 4.0

    def load(seed: int) -> None:
        n = seed
        while time.monotonic() < stop and not errors:
            i = n % 20
            try:
                if n % 2:
                    tallies[i].add()
                else:
                    ref = tallies[i].add.send()
                    with lock:
                        sends.append(ref)
            except BaseException as exc:
                errors.append(exc)
                return
            with lock:
                succeeded[i] += 1
            n += 7

    threads = [threading.Thread(target=load, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [], errors[:3]
    for ref in sends:
        ref.wait(timeout=60)
    assert [t.snapshot()["n"] for t in tallies] == succeeded
    assert count_rows(rt, "messages", "actor_type = 'Tally' AND status <> 'completed'") == 0
    assert count_rows(rt, "messages", "actor_type = 'Tally'") == sum(succeeded)
    for ref in poisoned:
        with pytest.raises(MessageFailed, match="poison_reminder refused"):
            ref.wait(timeout=60)
    with rt.store.read() as tx:
        attempts = tx.rows("SELECT attempts FROM solid_messages WHERE actor_type = 'Poison'")
    assert [a for (a,) in attempts] == [3] * len(poisoned)
    assert poison.snapshot()["runs"] == 0  # no refused turn left its state behind
    assert count_rows(rt, "reminders") == 0


def test_a_direct_call_whose_commit_is_refused_fails_as_a_dead_letter_not_a_database_error(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=2, max_attempts=2)
    refuse_poison_reminders(rt)
    with rt:
        poison = rt.ref(Poison, "p")
        poison.touch()  # held idle here: the next sync call runs in the caller's thread
        with pytest.raises(MessageFailed, match="poison_reminder refused") as failed:
            poison.arm()
        with rt.store.read() as tx:
            row = tx.row(
                "SELECT status, attempts FROM solid_messages WHERE id = :id",
                {"id": failed.value.message_id},
            )
        assert tuple(row) == ("dead", 2)
        poison.touch()  # the mailbox moved on


# --- 21: batched claims and renewals -------------------------------------------------------


def test_a_claim_the_database_refuses_does_not_hold_up_the_other_claims_of_its_batch(
    make_runtime: Callable[..., Runtime],
) -> None:
    caller = make_runtime(workers=0)
    stuck = caller.ref(Tally, "stuck").add.send()
    free = caller.ref(Tally, "free").add.send()
    refuse(
        caller,
        "stuck_claim",
        "actors",
        "UPDATE",
        "NEW.actor_id = 'stuck' AND NEW.lease_owner IS NOT NULL AND OLD.lease_owner IS NULL",
    )
    worker = make_runtime(workers=2)
    worker.register(Tally)
    with worker:
        assert free.wait(timeout=20) == 1  # both were found by one poll, claimed apart
        assert stuck.status() == "queued"


def test_a_lease_whose_renewal_is_refused_does_not_stop_the_renewal_of_the_others(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=1, lease_duration=1.5, idle_timeout=60)
    with rt:
        rt.ref(Tally, "stuck").add()
        rt.ref(Tally, "free").add()
        refuse(
            rt,
            "stuck_renewal",
            "actors",
            "UPDATE",
            "NEW.actor_id = 'stuck' AND NEW.done_seq = OLD.done_seq "
            "AND NEW.lease_expires_at > OLD.lease_expires_at",
        )

        def expiry() -> int:
            with rt.store.read() as tx:
                return int(
                    tx.scalar("SELECT lease_expires_at FROM solid_actors WHERE actor_id = 'free'")
                )

        before = expiry()
        maintained = rt.kernel.pool.poller.last_maintained
        deadline = time.monotonic() + 20
        while rt.kernel.pool.poller.last_maintained == maintained and time.monotonic() < deadline:
            time.sleep(0.05)
        assert rt.kernel.pool.poller.last_maintained != maintained, "no maintenance committed"
        assert expiry() > before


# --- 21: SQLite's group commit ----------------------------------------------------------------


def _batch_behind_a_blocker(rt: Runtime, bodies: list[Callable[[Tx], Any]]) -> list[Any]:
    """Submit ``bodies`` while the writer thread is held, so they form one group commit."""
    gate = threading.Event()
    first = rt.store.transact_future(lambda tx: gate.wait(10))
    futures = [rt.store.transact_future(body, isolated=False) for body in bodies]
    gate.set()
    first.result(10)
    return futures


def _names(rt: Runtime) -> set[str]:
    with rt.store.read() as tx:
        return {r[0] for r in tx.rows("SELECT name FROM solid_schema")}


def test_a_driver_error_in_one_body_of_a_group_commit_fails_that_body_alone(
    tmp_path: Path,
) -> None:
    rt = Runtime(f"sqlite:///{tmp_path / 'g.db'}", workers=0)
    rt.install()

    def insert(name: str) -> Callable[[Tx], str]:
        def body(tx: Tx) -> str:
            tx.run("INSERT INTO solid_schema (name, version) VALUES (:n, 1)", {"n": name})
            return name

        return body

    def refused(tx: Tx) -> None:
        insert("half")(tx)
        insert("solid_objects")(tx)  # the primary key exists: IntegrityError mid-body

    try:
        before, failing, after = _batch_behind_a_blocker(
            rt, [insert("before"), refused, insert("after")]
        )
        with pytest.raises(DatabaseError, match="UNIQUE constraint failed"):
            failing.result(10)
        assert (before.result(10), after.result(10)) == ("before", "after")
        assert _names(rt) == {"solid_objects", "before", "after"}
    finally:
        rt.close()


def test_a_group_commit_that_does_not_fit_on_the_disk_fails_only_the_body_too_big(
    small_disk: Path,
) -> None:
    rt = Runtime(f"sqlite:///{small_disk / 'app.db'}", workers=0)
    rt.install()
    with rt.engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE blobs (data TEXT)")
    filler = fill(small_disk)
    os.truncate(filler, os.path.getsize(filler) - 256 * 1024)  # room for small writes only

    def small(name: str) -> Callable[[Tx], str]:
        def body(tx: Tx) -> str:
            tx.run("INSERT INTO solid_schema (name, version) VALUES (:n, 1)", {"n": name})
            return name

        return body

    def big(tx: Tx) -> None:
        tx.run("INSERT INTO blobs (data) VALUES (:d)", {"d": "x" * 600 * 1024})

    try:
        first, too_big, second = _batch_behind_a_blocker(rt, [small("a"), big, small("b")])
        with pytest.raises(DatabaseError, match="disk is full"):
            too_big.result(10)
        assert (first.result(10), second.result(10)) == ("a", "b")
        assert _names(rt) == {"solid_objects", "a", "b"}
    finally:
        rt.close()
    assert integrity(small_disk / "app.db") == [("ok",)]


def test_a_refused_enqueue_in_a_hot_actors_batch_fails_alone(
    make_runtime: Callable[..., Runtime],
) -> None:
    """The servers' ``EnqueueBatcher``: one caller's statement refused by the database
    (a trigger) fails that caller alone; the batch it shared runs again without it."""
    rt = make_runtime(workers=0)
    refuse(rt, "poison_row", "schema", "INSERT", "NEW.name = 'poison'")
    batcher = EnqueueBatcher(rt.store.transact, patience=60.0)
    gate, holding = threading.Event(), threading.Event()

    def insert(name: str) -> Callable[[Tx], str]:
        def body(tx: Tx) -> str:
            if name == "first":
                holding.set()
                assert gate.wait(10)
            tx.run("INSERT INTO solid_schema (name, version) VALUES (:n, 1)", {"n": name})
            return name

        return body

    futures: dict[str, Any] = {}

    def submit(name: str) -> None:
        futures[name] = batcher.submit("hot", insert(name))

    threads = [threading.Thread(target=submit, args=("first",))]
    threads[0].start()
    assert holding.wait(10)
    for n, name in enumerate(["a", "poison", "b"], start=1):
        threads.append(threading.Thread(target=submit, args=(name,)))
        threads[-1].start()
        deadline = time.monotonic() + 10
        while len(batcher._waiting) < n and time.monotonic() < deadline:
            time.sleep(0.001)
    gate.set()
    for t in threads:
        t.join(10)
    with pytest.raises(DatabaseError, match="poison_row refused"):
        futures["poison"].result()
    assert [futures[k].result() for k in ("first", "a", "b")] == ["first", "a", "b"]
    assert _names(rt) == {"solid_objects", "first", "a", "b"}


# --- 12.9: a turn that outlasts its lease ------------------------------------------------------

#: C functions called through ``PyDLL`` keep the GIL: nothing else in the process runs.
_libc = ctypes.PyDLL(None)


class Hog(Actor):
    runs: ClassVar[list[str]] = []

    def hog(self) -> None:
        Hog.runs.append(self.actor_id)
        _libc.usleep(1_000_000)  # 1 s holding the GIL: the lease (0.5 s) cannot be renewed


@pytest.mark.timeout(120)
def test_a_turn_that_outlasts_its_lease_backs_off_and_becomes_a_dead_letter(
    make_runtime: Callable[..., Runtime],
) -> None:
    rt = make_runtime(workers=1, lease_duration=0.5, max_attempts=3)
    Hog.runs.clear()
    with rt:
        hog = rt.ref(Hog, "h").hog.send()
        with pytest.raises(MessageFailed, match="raise lease_duration") as failed:
            hog.wait(timeout=60)
    assert "started 3 times without finishing" in str(failed.value)
    assert Hog.runs == ["h"] * 3  # one run per attempt, then no more
    with rt.store.read() as tx:
        row = tx.row("SELECT status FROM solid_messages WHERE id = :id", {"id": hog.id})
    assert tuple(row) == ("dead",)
