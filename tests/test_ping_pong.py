"""Actors messaging each other concurrently: lock-order deadlocks must not lose or stall work."""

from __future__ import annotations

import time
from collections.abc import Callable

from solid_objects import Actor, Runtime

from .conftest import count_rows


class Player(Actor):
    hits: int = 0

    def ball(self, peer: str, left: int) -> None:
        self.hits += 1
        if left > 0:
            self.send_to(Player, peer).ball(peer=self.actor_id, left=left - 1)


def test_pairs_of_actors_volley_without_losing_a_message(
    make_runtime: Callable[..., Runtime],
) -> None:
    pairs, hops = 8, 20
    with make_runtime(workers=4) as rt:
        for i in range(pairs):
            # both ends serve at once, so each pair's turns lock each other's rows
            rt.ref(Player, f"a{i}").ball.send(peer=f"b{i}", left=hops)
            rt.ref(Player, f"b{i}").ball.send(peer=f"a{i}", left=hops)
        deadline = time.monotonic() + 60
        expected = pairs * 2 * (hops + 1)
        while time.monotonic() < deadline:
            done = count_rows(rt, "messages", "status = 'completed'")
            if done == expected:
                break
            time.sleep(0.05)
        assert count_rows(rt, "messages", "status = 'completed'") == expected
        assert count_rows(rt, "messages", "status <> 'completed'") == 0
        hits = [
            rt.ref(Player, f"{side}{i}").snapshot()["hits"] for i in range(pairs) for side in "ab"
        ]
        assert hits == [hops + 1] * (2 * pairs)  # each player got every ball once
