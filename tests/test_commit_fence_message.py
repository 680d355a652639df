"""A turn's commit finishes only a message that was handed out.

The fence of a queued turn's commit requires the message it finishes to be in the
mailbox (its id, actor, seq, not finished yet) and its seq to be below the actor's
``next_seq``. A message that exists nowhere else (one a forged wake-up carried)
is refused with :class:`LeaseLost` and writes nothing: the actor does not move past
a seq that the next enqueue is given. Checked through the store on every database,
on both commit paths (PostgreSQL's one statement, and the general one).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from solid_objects import Runtime
from solid_objects.errors import LeaseLost
from solid_objects.store import Claimed
from solid_objects.store.rows import new_id
from tests.test_turn_commit import OneStatementTally, claim, commit, run, tally


def actor_row(rt: Runtime, pk: int) -> tuple[int, int, str | None]:
    with rt.store.read() as tx:
        done, next_seq, state = tx.row(
            "SELECT done_seq, next_seq, state FROM {actors} WHERE pk = :pk", {"pk": pk}
        )
    return int(done), int(next_seq), state


def commit_forged(rt: Runtime, claimed: Claimed, *, effect: bool, **changes: object) -> None:
    """Run the claimed head's turn, then commit it as a message changed by ``changes``."""
    outcome = run(rt, claimed)
    assert bool(outcome.staged) is effect  # a staged effect takes the general path
    assert claimed.head is not None
    forged = copy.copy(claimed.head)
    for name, value in changes.items():
        setattr(forged, name, value)
    as_forged = Claimed(
        lease=claimed.lease,
        actor_type=claimed.actor_type,
        actor_id=claimed.actor_id,
        state=claimed.state,
        state_version=claimed.state_version,
        done_seq=claimed.done_seq,
        attempt=claimed.attempt,
        head=forged,
    )
    rt.store.transact(lambda tx: commit(rt.store, tx, as_forged, outcome))


@pytest.mark.parametrize("effect", [False, True], ids=["plain", "staged"])
def test_a_commit_of_a_message_that_does_not_exist_writes_nothing(
    make_runtime: Callable[..., Runtime], effect: bool
) -> None:
    rt = tally(make_runtime)
    ref = rt.ref(OneStatementTally, "fenced")
    real = ref.add.send(n=2, effect=effect)
    claimed = claim(rt, "fenced", "worker-a")
    pk = claimed.lease.pk
    with pytest.raises(LeaseLost):
        commit_forged(rt, claimed, effect=effect, id=new_id())
    assert actor_row(rt, pk) == (0, 2, None)
    assert real.status() == "queued"
    # The real head still commits under the same lease.
    outcome = run(rt, claimed)
    rt.store.transact(lambda tx: commit(rt.store, tx, claimed, outcome))
    assert real.result() == 2


@pytest.mark.parametrize("effect", [False, True], ids=["plain", "staged"])
def test_a_commit_of_a_seq_not_handed_out_writes_nothing(
    make_runtime: Callable[..., Runtime], effect: bool
) -> None:
    """The next seq, before any enqueue took it: the next real message must run."""
    rt = tally(make_runtime)
    ref = rt.ref(OneStatementTally, "ahead")
    first = ref.add.send(n=2, effect=effect)
    claimed = claim(rt, "ahead", "worker-a")
    outcome = run(rt, claimed)
    rt.store.transact(lambda tx: commit(rt.store, tx, claimed, outcome))
    assert first.result() == 2
    pk = claimed.lease.pk
    assert actor_row(rt, pk)[:2] == (1, 2)
    with pytest.raises(LeaseLost):
        commit_forged(rt, claimed, effect=effect, id=new_id(), seq=2, arguments='{"n":666}')
    done, next_seq, state = actor_row(rt, pk)
    assert (done, next_seq) == (1, 2) and state is not None and '"n":2' in state.replace(" ", "")
    second = ref.add.send(n=3)  # gets seq 2, and runs
    with rt.store.read() as tx:
        claimed.head = rt.store.head_message(tx, pk, 2)
    assert claimed.head is not None and claimed.head.id == second.id
    claimed.state, claimed.done_seq = state, 1
    outcome = run(rt, claimed)
    rt.store.transact(lambda tx: commit(rt.store, tx, claimed, outcome))
    assert second.result() == 5
