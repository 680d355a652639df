"""Seat reservation with expiring holds: two buyers can never both get the last seat.

A ``Show`` actor owns its seats. ``hold`` puts a seat on hold for a buyer and
schedules ``expire_hold`` for that seat (one reminder per seat, keyed by the
seat); ``buy`` turns a hold into a sale and cancels the reminder; an expired
hold frees the seat again. Every decision is one turn of one actor, so the
check ("is this seat free?") and the write happen in the same commit.
Run it: ``python -m examples.seats``.
"""

from __future__ import annotations

import tempfile
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

from solid_objects import Actor, Rejected, Runtime, query

HOLD_FOR = timedelta(minutes=10)


class Show(Actor):
    seats: dict[str, str] = {}  # seat -> "held:<buyer>" or "sold:<buyer>"; absent = free
    capacity: int = 3

    def hold(self, seat: str, buyer: str) -> str:
        if not 1 <= _number(seat) <= self.capacity:
            raise Rejected("no_such_seat", f"seat {seat} does not exist")
        taken = self.seats.get(seat)
        if taken is not None and not taken.endswith(f":{buyer}"):
            raise Rejected("taken", f"seat {seat} is not available")
        self.seats[seat] = f"held:{buyer}"
        self.schedule(delay=HOLD_FOR, key=seat).expire_hold(seat=seat, buyer=buyer)
        return seat

    def buy(self, seat: str, buyer: str) -> str:
        if self.seats.get(seat) != f"held:{buyer}":
            raise Rejected("no_hold", f"{buyer} holds no seat {seat}")
        self.seats[seat] = f"sold:{buyer}"
        self.cancel_schedule(self.expire_hold, key=seat)
        return seat

    def expire_hold(self, seat: str, buyer: str) -> None:
        if self.seats.get(seat) == f"held:{buyer}":
            del self.seats[seat]

    @query
    def free(self) -> list[str]:
        return [str(n) for n in range(1, self.capacity + 1) if str(n) not in self.seats]


def _number(seat: str) -> int:
    return int(seat) if seat.isdigit() else 0


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="solid-seats-") as folder:
        _demo(f"sqlite:///{Path(folder) / 'seats.db'}")


def _demo(url: str) -> None:
    runtime = Runtime(url, workers=4)
    try:
        runtime.install()
        with runtime:
            show = runtime.ref(Show, "opening-night")

            def try_hold(buyer: str) -> str:
                try:
                    return f"{buyer} holds seat {show.hold(seat='3', buyer=buyer)}"
                except Rejected as exc:
                    return f"{buyer}: {exc.code}"

            with ThreadPoolExecutor(8) as pool:  # eight buyers race for the last seat
                for line in pool.map(try_hold, [f"buyer{i}" for i in range(8)]):
                    print(line)
            print("free seats:", show.free())
    finally:
        runtime.close()  # before the folder goes: the database files are closed
    later = Runtime(url, workers=0)
    try:
        later.register(Show)
        later.testing.run_due_reminders(datetime.now(UTC) + HOLD_FOR + timedelta(seconds=1))
        print("after the hold expired:", later.ref(Show, "opening-night").free())
    finally:
        later.close()

if __name__ == "__main__":
    main()
