"""``Waiters.take``: the outcome a direct turn already handed over, taken without the
wait loop, and nothing else (a nudge, an error or no outcome leave the waiter as it is)."""

from __future__ import annotations

from solid_objects.engine.outcomes import NUDGE, Outcome, Waiters


def test_take_returns_a_handed_over_outcome_once_and_forgets_the_waiter() -> None:
    waiters = Waiters()
    waiters.register("m1", enqueueing=True)
    assert waiters.take("m1") is None  # no outcome yet: still waited for
    assert waiters.has("m1") and waiters.where("m1") == "enqueueing"
    waiters.register("m1").set_result(Outcome("completed", "5", None))
    assert waiters.take("m1") == Outcome("completed", "5", None)
    assert not waiters.has("m1") and waiters.where("m1") == "remote"
    assert waiters.take("m1") is None


def test_take_leaves_a_nudge_or_an_error_to_the_wait_loop() -> None:
    waiters = Waiters()
    waiters.register("nudged").set_result(NUDGE)
    waiters.register("failed").set_exception(RuntimeError("enqueue failed"))
    assert waiters.take("nudged") is None and waiters.has("nudged")
    assert waiters.take("failed") is None and waiters.has("failed")
    assert waiters.take("unknown") is None
