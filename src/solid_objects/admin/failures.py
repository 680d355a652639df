"""The administration API's failed work: dead letters and effects, listed and repaired.

A part of :class:`~solid_objects.admin.Administration`. A repair is checked against
the primary's rows in the transaction that writes it, with its audit record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..codec import check_identifier
from ..errors import InvalidArguments, NotFound, OperationRefused
from ..store.admin_rows import RetryOutcome
from ..store.store import new_id
from .base import (
    BATCH,
    Caller,
    Listings,
    check_filters,
    check_ids,
    check_limit,
    check_reason,
    cursor_pair,
    decode_cursor,
    in_batches,
    log,
    page_of,
)
from .views import (
    DeadLetter,
    DiscardedDeadLetter,
    EffectInfo,
    Page,
    RetriedDeadLetter,
    RetriedEffect,
    datetime_of,
)

if TYPE_CHECKING:
    from ..runtime import Runtime
    from ..store import Tx


class Failures:
    """Dead letters and dead effects: list them, inspect one, retry or discard."""

    def __init__(self, runtime: Runtime, caller: Caller, listings: Listings) -> None:
        self._runtime = runtime
        self._authorize = caller.authorize
        self._listings = listings

    # --- dead letters -------------------------------------------------------------------

    def list_dead_letters(
        self,
        *,
        actor_type: str | None = None,
        actor_id: str | None = None,
        operation: str | None = None,
        state: str = "open",
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[DeadLetter]:
        """Dead letters, the most recent death first.

        ``state``: ``open`` (the default: neither retried nor discarded),
        ``retried``, ``discarded`` or ``all``.
        """
        if state not in ("open", "retried", "discarded", "all"):
            raise InvalidArguments(f"state must be open, retried, discarded or all, not {state!r}")
        check_filters(actor_type=actor_type, actor_id=actor_id, operation=operation)
        check_limit(limit)
        after = decode_cursor(cursor, "dead_letters")
        self._authorize(
            "dead_letters.list",
            actor_type=actor_type,
            actor_id=actor_id,
            operation=operation,
            state=state,
        )
        store = self._runtime.store
        with self._listings.read() as (tx, lag_ms):
            now = store.now(tx)
            rows = store.dead_letters.list_dead_letters(
                tx,
                actor_type=actor_type,
                actor_id=actor_id,
                operation=operation,
                state=state,
                after=None if after is None else cursor_pair(after),
                limit=limit + 1,
            )
        rows, next_cursor = page_of(
            rows, limit, "dead_letters", lambda last: [last.completed_at or 0, last.id]
        )
        return Page(
            [DeadLetter.of(r) for r in rows],
            next_cursor,
            datetime_of(now),
            replica_lag_ms=lag_ms,
        )

    def get_dead_letter(self, message_id: str) -> DeadLetter:
        """One dead letter, with its resolution if an operator handled it."""
        check_identifier(message_id, what="message id")
        self._authorize("dead_letters.inspect", message_id=message_id)
        store = self._runtime.store
        with store.read() as tx:
            row, status = store.dead_letters.dead_letter(tx, message_id)
        if row is None:
            raise NotFound(f"no message {message_id!r} (never sent, or pruned)")
        if status != "dead":
            raise NotFound(f"message {message_id} is {status}, not a dead letter")
        return DeadLetter.of(row)

    def retry_dead_letter(self, message_id: str, *, reason: str | None = None) -> RetriedDeadLetter:
        """Send a dead letter again; see :meth:`retry_dead_letters`."""
        return self.retry_dead_letters([message_id], reason=reason)[0]

    def retry_dead_letters(
        self, message_ids: Sequence[str], *, reason: str | None = None
    ) -> list[RetriedDeadLetter]:
        """Send each dead letter's operation and arguments again, to the tail of its mailbox.

        Idempotent: a dead letter is retried once, however often this is called
        (later calls return the first retry's message id with ``already=True``).
        Every id is checked first; if one is unknown, not dead, discarded, or its
        actor was destroyed since, :class:`NotFound` or :class:`OperationRefused`
        is raised and nothing is written. Writes commit ``BATCH`` ids at a time,
        each with its audit record.
        """
        ids = check_ids(message_ids, "message")
        reason = check_reason(reason)
        principal = self._authorize("dead_letters.retry", message_ids=tuple(ids))
        store = self._runtime.store
        with store.read() as tx:
            for message_id in ids:
                self._check_retryable(tx, message_id)
        results: list[RetriedDeadLetter] = []
        for start in range(0, len(ids), BATCH):
            batch = ids[start : start + BATCH]

            def body(tx: Tx, batch: list[str] = batch) -> list[RetryOutcome]:
                outcomes = [
                    store.dead_letters.retry_dead_letter(
                        tx,
                        message_id,
                        retry_id=new_id(),
                        principal=principal,
                        reason=reason,
                        audit_id=new_id(),
                    )
                    for message_id in batch
                ]
                for outcome in outcomes:
                    self._refuse_retry(outcome)  # raising rolls the whole batch back
                return outcomes

            outcomes = store.transact(body)
            self._runtime.kernel.route([o.enqueued for o in outcomes if o.enqueued is not None])
            for o in outcomes:
                assert o.retry_message_id is not None
                results.append(
                    RetriedDeadLetter(o.message_id, o.retry_message_id, o.kind != "retried")
                )
                if o.kind == "retried":
                    log.info(
                        "%s retried dead letter %s as %s",
                        principal,
                        o.message_id,
                        o.retry_message_id,
                        extra={"solid_action": "dead_letter_retried", "principal": principal},
                    )
        return results

    def _check_retryable(self, tx: Tx, message_id: str) -> None:
        store = self._runtime.store
        row, status = store.dead_letters.dead_letter(tx, message_id)
        if row is None:
            self._refuse_retry(RetryOutcome("missing", message_id))
        elif status != "dead":
            self._refuse_retry(RetryOutcome("not_dead", message_id, status=status))
        elif row.resolution == "discarded":
            self._refuse_retry(RetryOutcome("discarded", message_id))

    @staticmethod
    def _refuse_retry(outcome: RetryOutcome) -> None:
        mid = outcome.message_id
        if outcome.kind == "missing":
            raise NotFound(f"no message {mid!r} (never sent, or pruned)")
        if outcome.kind == "not_dead":
            raise OperationRefused(
                f"message {mid} is {outcome.status}, not a dead letter: only dead letters "
                "can be retried"
            )
        if outcome.kind == "discarded":
            raise OperationRefused(f"dead letter {mid} was discarded; it cannot be retried")
        if outcome.kind == "actor_gone":
            raise OperationRefused(
                f"the actor incarnation of dead letter {mid} was destroyed since; "
                "retrying it would send it to a new, empty actor"
            )

    def discard_dead_letter(
        self, message_id: str, *, reason: str | None = None
    ) -> DiscardedDeadLetter:
        """Discard one dead letter: :meth:`discard_dead_letters` for a single id."""
        return self.discard_dead_letters([message_id], reason=reason)[0]

    def discard_dead_letters(
        self, message_ids: Sequence[str], *, reason: str | None = None
    ) -> list[DiscardedDeadLetter]:
        """Mark dead letters discarded: they no longer list as open. Idempotent.

        The message rows stay as they are (``dead``), so a caller holding a
        reference still reads its failure. A dead letter that was already retried
        cannot be discarded (:class:`OperationRefused`); nothing is written then.
        """
        ids = check_ids(message_ids, "message")
        reason = check_reason(reason)
        principal = self._authorize("dead_letters.discard", message_ids=tuple(ids))
        store = self._runtime.store

        def discard(tx: Tx, message_id: str) -> DiscardedDeadLetter:
            o = store.dead_letters.discard_dead_letter(
                tx, message_id, principal=principal, reason=reason, audit_id=new_id()
            )
            if o.kind == "missing":
                raise NotFound(f"no message {message_id!r} (never sent, or pruned)")
            if o.kind == "not_dead":
                raise OperationRefused(f"message {message_id} is {o.status}, not a dead letter")
            if o.kind == "retried":
                raise OperationRefused(
                    f"dead letter {message_id} was already retried as "
                    f"{o.retry_message_id}; it cannot be discarded"
                )
            return DiscardedDeadLetter(message_id, o.kind != "discarded")

        return in_batches(store, ids, discard)

    # --- effects ------------------------------------------------------------------------

    def list_effects(
        self,
        *,
        status: str = "dead",
        actor_type: str | None = None,
        name: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[EffectInfo]:
        """Effects of one status (``dead`` by default), newest first."""
        if status not in ("pending", "retrying", "running", "done", "dead"):
            raise InvalidArguments(
                f"status must be pending, retrying, running, done or dead, not {status!r}"
            )
        check_filters(actor_type=actor_type, effect_name=name)
        check_limit(limit)
        after = decode_cursor(cursor, "effects")
        self._authorize("effects.list", status=status, actor_type=actor_type, name=name)
        store = self._runtime.store
        with self._listings.read() as (tx, lag_ms):
            now = store.now(tx)
            rows = store.admin.list_effects(
                tx,
                status=status,
                actor_type=actor_type,
                name=name,
                after=None if after is None else cursor_pair(after),
                limit=limit + 1,
            )
        finished = status in ("dead", "done")
        rows, next_cursor = page_of(
            rows,
            limit,
            "effects",
            lambda last: [(last.completed_at if finished else last.created_at) or 0, last.id],
        )
        return Page(
            [EffectInfo.of(r) for r in rows],
            next_cursor,
            datetime_of(now),
            replica_lag_ms=lag_ms,
        )

    def get_effect(self, effect_id: str) -> EffectInfo:
        """One effect by its id (``ctx.id``): status, attempts, last error, claim."""
        check_identifier(effect_id, what="effect id")
        self._authorize("effects.inspect", effect_id=effect_id)
        store = self._runtime.store
        with store.read() as tx:
            row = store.admin.effect(tx, effect_id)
        if row is None:
            raise NotFound(f"no effect {effect_id!r}")
        return EffectInfo.of(row)

    def retry_effect(self, effect_id: str, *, reason: str | None = None) -> RetriedEffect:
        """Retry one dead effect: :meth:`retry_effects` for a single id."""
        return self.retry_effects([effect_id], reason=reason)[0]

    def retry_effects(
        self, effect_ids: Sequence[str], *, reason: str | None = None
    ) -> list[RetriedEffect]:
        """Put dead effects back to pending with their attempts reset.

        The handler runs again with the same ``ctx.id``. Idempotent: an effect that
        is no longer dead (pending, running) is left alone (``already=True``); a
        ``done`` effect is refused, as is an unknown id, and nothing is written then.
        """
        ids = check_ids(effect_ids, "effect")
        reason = check_reason(reason)
        principal = self._authorize("effects.retry", effect_ids=tuple(ids))
        store = self._runtime.store

        def retry(tx: Tx, effect_id: str) -> RetriedEffect:
            o = store.admin.retry_effect(
                tx, effect_id, principal=principal, reason=reason, audit_id=new_id()
            )
            if o.kind == "missing":
                raise NotFound(f"no effect {effect_id!r}")
            if o.kind == "not_dead" and o.status == "done":
                raise OperationRefused(
                    f"effect {effect_id} is done; only dead effects can be retried"
                )
            return RetriedEffect(effect_id, o.status or "pending", o.kind != "retried")

        results = in_batches(store, ids, retry)
        self._runtime.kernel.wake_workers()
        return results
