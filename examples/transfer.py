"""A money transfer between two accounts as a saga of requests, with compensation.

A ``Transfer`` actor asks the source ``Account`` to withdraw, then the destination to
deposit, with ``self.request``: each answer comes back as a message to the transfer,
which never waits inside a turn. When the deposit is refused, fails or times out, the
transfer compensates: it voids the deposit at the destination (a deposit that still
arrives later is reversed: the void is sent after it, to the same mailbox) and refunds
the source. Every account operation is keyed by the transfer id, so a repeat changes
nothing. Run it: ``python -m examples.transfer``.
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from solid_objects import Actor, Rejected, Reply, Runtime
from solid_objects.admin import allow

TIMEOUT = timedelta(seconds=30)


class Account(Actor):
    balance: int = 0
    frozen: bool = False
    #: transfer id -> amount applied here (+ deposit, - withdrawal); "void" once voided.
    applied: dict[str, int] = {}
    voided: list[str] = []

    def open(self, balance: int, frozen: bool = False) -> None:
        self.balance, self.frozen = balance, frozen

    def withdraw(self, transfer_id: str, amount: int) -> int:
        if transfer_id in self.applied:
            return self.balance  # a repeat: already done
        if amount > self.balance:
            raise Rejected("insufficient_funds", f"balance {self.balance} < {amount}")
        self.balance -= amount
        self.applied[transfer_id] = -amount
        return self.balance

    def deposit(self, transfer_id: str, amount: int) -> int:
        if self.frozen:
            raise Rejected("frozen", "this account takes no deposits")
        if transfer_id in self.applied or transfer_id in self.voided:
            return self.balance  # a repeat, or voided before it arrived
        self.balance += amount
        self.applied[transfer_id] = amount
        return self.balance

    def void(self, transfer_id: str) -> None:
        """Undo this transfer's deposit if it was applied; refuse it if it comes later."""
        self.voided.append(transfer_id)
        self.balance -= max(self.applied.pop(transfer_id, 0), 0)

    def refund(self, transfer_id: str) -> None:
        """Give back this transfer's withdrawal, once, if it was applied."""
        taken = self.applied.get(transfer_id, 0)
        if taken < 0:
            self.balance -= taken
            self.applied[transfer_id] = 0


class Transfer(Actor):
    source: str = ""
    destination: str = ""
    amount: int = 0
    status: str = "new"

    def start(self, source: str, destination: str, amount: int) -> None:
        self.source, self.destination, self.amount = source, destination, amount
        self.status = "debiting"
        self.request(Account, source, reply_to=self.on_debit, timeout=TIMEOUT).withdraw(
            transfer_id=self.actor_id, amount=amount
        )

    def on_debit(self, reply: Reply) -> None:
        if reply.status == "completed":
            self.status = "crediting"
            self.request(
                Account, self.destination, reply_to=self.on_credit, timeout=TIMEOUT
            ).deposit(transfer_id=self.actor_id, amount=self.amount)
            return
        # Not debited, or not known: a late withdrawal is given back by the refund.
        self.send_to(Account, self.source).refund(transfer_id=self.actor_id)
        self.status = f"failed: debit {reply.status}"

    def on_credit(self, reply: Reply) -> None:
        if reply.status == "completed":
            self.status = "done"
            return
        self.send_to(Account, self.destination).void(transfer_id=self.actor_id)
        self.send_to(Account, self.source).refund(transfer_id=self.actor_id)
        self.status = f"compensated: credit {reply.status}"


def run_scenarios(url: str) -> dict[str, dict[str, object]]:
    """The three endings of a transfer; returns each one's status and balances."""
    runtime = Runtime(url, workers=0)
    runtime.install()
    runtime.register(Account)
    runtime.register(Transfer)
    runtime.admin.set_policy(allow({"ops:*": "*"}))
    ops = runtime.admin.as_principal("ops:demo")
    drain = runtime.testing.drain
    endings: dict[str, dict[str, object]] = {}
    try:
        scenarios = (("ok", False, False), ("frozen", True, False), ("timeout", False, True))
        for name, frozen, stall in scenarios:
            src, dst = f"{name}-alice", f"{name}-bob"
            runtime.ref(Account, src).open.send(balance=100)
            runtime.ref(Account, dst).open.send(balance=0, frozen=frozen)
            drain()
            if stall:  # bob's mailbox stops: the deposit waits past its timeout
                ops.pause_actor("Account", dst)
            runtime.ref(Transfer, name).start.send(source=src, destination=dst, amount=30)
            drain()
            if stall:
                runtime.testing.run_due_reminders(datetime.now(UTC) + 2 * TIMEOUT)
                ops.resume_actor("Account", dst)  # the deposit runs late, then the void
                drain()
            endings[name] = {
                "status": runtime.ref(Transfer, name).snapshot()["status"],
                "source": runtime.ref(Account, src).snapshot()["balance"],
                "destination": runtime.ref(Account, dst).snapshot()["balance"],
            }
    finally:
        runtime.close()
    return endings


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="solid-transfer-") as folder:
        for name, ending in run_scenarios(f"sqlite:///{Path(folder) / 'bank.db'}").items():
            print(f"{name}: {ending}")


if __name__ == "__main__":
    main()
