"""SQL of coalescing: a keyed message that replaces a still-queued one instead of adding
another (a debounce).

A send with ``coalesce_key`` is enqueued as usual, at the end of the mailbox, under the
lock of its actor's row (``MailboxStatements.enqueue``). In the same transaction, while
that lock is held, each queued message of the actor with the same key and operation
becomes ``replaced``, naming the new message in ``replaced_by``, unless a worker may
have read its arguments.

A worker reads a keyed message only once it is the head: a claim reads the head
(``done_seq + 1``), a commit reads the next head in its own transaction, and a keyed
message is never carried to a worker before that (no ``m:`` wake-up, no local inbox:
the sender signals without it). So while a lease on the actor is live, every keyed
message but the head may be replaced; with no live lease, the head too (a worker whose
lease expired can never commit its turn: the fence compares the lease's expiry). A
claim or a commit takes the row lock held here, so it reads the replacement after this
commit. A replaced message keeps its place and seq: the worker that reaches it
finishes it without running it, as a cancelled one, so the mailbox order and the
commit fence are untouched.
"""

from __future__ import annotations

from .dialect import Tx
from .rows import MSG_COLS, MessageRow, message_row

#: How many replacements a read of a message follows (a chain of them is one per send).
MAX_HOPS = 10_000


def replace_queued(
    tx: Tx, *, actor_pk: int, first_seq: int, operation: str, key: str, by: str
) -> int:
    """Mark the queued messages of the actor from ``first_seq`` on with ``key`` and
    ``operation`` replaced by message ``by``; how many. The caller holds the actor
    row's lock, and starts after the head when a lease on the actor is live."""
    return tx.run(
        "UPDATE {messages} SET status = 'replaced', replaced_by = :by "
        "WHERE actor_pk = :pk AND seq >= :first AND coalesce_key = :k AND operation = :op "
        "AND status = 'queued'",
        {"by": by, "pk": actor_pk, "first": first_seq, "k": key, "op": operation},
    )


def final_message(tx: Tx, message: MessageRow) -> MessageRow | None:
    """The message whose outcome ``message``'s caller gets: ``message`` itself unless it
    was replaced, else the last of its replacements (None: pruned since)."""
    hops = 0
    while message.status == "replaced" and hops < MAX_HOPS:
        row = tx.row(
            f"SELECT {MSG_COLS} FROM {{messages}} WHERE id = "
            "(SELECT replaced_by FROM {messages} WHERE id = :id)",
            {"id": message.id},
        )
        if row is None:
            return None
        message, hops = message_row(row), hops + 1
    return message


def passed_at_destroy(tx: Tx, actor_pk: int) -> None:
    """The incarnation ends with messages no worker passed yet (replaced or cancelled
    while queued): they are finished now, so retention prunes them like the rest."""
    tx.run(
        "UPDATE {messages} SET completed_at = {now} WHERE actor_pk = :pk "
        "AND status IN ('replaced', 'cancelled') AND completed_at IS NULL",
        {"pk": actor_pk},
    )
