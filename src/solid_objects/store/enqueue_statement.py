"""The one-statement enqueue of a message due now (PostgreSQL's data-modifying ``WITH``).

:func:`enqueue_statement` builds it for :class:`~.mailbox.MailboxStatements`; it is
kept apart from the mailbox's other statements, which run one step at a time.
"""

from __future__ import annotations

import functools

from .notices import NoticeKey

#: The columns every enqueue writes to a new message, in the order of ``_insert_message``.
MESSAGE_COLUMNS = (
    "id, actor_pk, actor_type, actor_id, seq, operation, arguments, idempotency_key, status, "
    "available_at, attempts, created_at, traceparent, send_order, sender, priority"
)


@functools.cache
def enqueue_statement(*, claim: bool, limited: bool, notify: bool) -> str:
    """:meth:`MailboxStatements.enqueue` of a message due now, as one statement.

    ``l`` is ``_lock_actor``'s ``SELECT ... FOR UPDATE`` (its one ``{now}`` read after
    the lock), ``u`` the ``UPDATE`` that takes the next seq (and, with ``claim``, the
    lease when it is free: ``take``), ``INSERT`` the message; the final ``SELECT``
    returns the wake-up payload the Python path would choose (NULL: none; ``m:``
    carries the message, signed here: ``notices``) and, with ``notify``, sends it; after a claim,
    also what ``load_claimed`` reads of the actor row. No actor row: no row; a full
    mailbox (``limited``): a row of NULLs; either way nothing is written and the caller
    falls back.
    """
    # A full mailbox updates nothing but still returns the row (its u columns NULL), so
    # the caller tells it apart from a missing actor row.
    full = " AND c.next_seq - c.done_seq - 1 < :max" if limited else ""
    free = (
        "l.paused = 0 AND (l.lease_owner IS NULL OR l.lease_expires_at <= l.at_ms) "
        "AND (l.ready_at IS NULL OR l.ready_at <= l.at_ms)"
    )
    held = (
        "c.lease_owner IS NOT NULL AND c.lease_expires_at > c.at_ms AND c.paused = 0 "
        "AND (c.ready_at IS NULL OR c.ready_at <= c.at_ms)"
    )
    # m: with the message's fields when the caller found they fit (notices.message_fields),
    # else h: (the concatenation with a NULL :fields is NULL). c.next_seq is the new seq.
    owned = "CAST(c.pk AS TEXT) || ':' || c.lease_owner"
    carried = (
        f"'m:' || {owned} || ':' || CAST(c.next_seq AS TEXT) || ':' || CAST(c.at_ms AS TEXT) "
        "|| ':' || CAST(:fields AS TEXT)"
    )
    hint = f"CASE WHEN {held} THEN COALESCE({carried}, 'h:' || {owned}) ELSE 'w' END"
    if claim:
        # Our own lease that we may not take (paused, backing off): no wake-up, as before.
        take = f"COALESCE({free}, FALSE)"
        payload = f"CASE WHEN c.take OR c.lease_owner = :owner THEN NULL ELSE {hint} END"
        lease = (
            ", lease_owner = CASE WHEN c.take THEN :owner ELSE a.lease_owner END, "
            "lease_token = CASE WHEN c.take THEN :token ELSE a.lease_token END, "
            "lease_generation = a.lease_generation + CASE WHEN c.take THEN 1 ELSE 0 END, "
            "lease_expires_at = CASE WHEN c.take THEN c.at_ms + :lease_ms "
            "ELSE a.lease_expires_at END, "
            "attempt = a.attempt + CASE WHEN c.take AND a.lease_owner IS DISTINCT FROM :owner "
            "THEN 1 ELSE 0 END, "  # see claim()
            "updated_at = CASE WHEN c.take THEN c.at_ms ELSE a.updated_at END"
        )
        # What load_claimed would read after a claim (the row is locked: the same).
        claimed = (
            ", CASE WHEN c.take THEN a.state END AS state, a.state_version, a.done_seq, a.attempt"
        )
        state = ", u.state, u.state_version, u.done_seq, u.attempt"
    else:
        take, payload, lease, claimed, state = "FALSE", hint, "", "", ""
    # An m: gets its MAC (the key's pads are parameters), as notices.message_hint signs it.
    signed = (
        "CASE WHEN left(u.payload, 2) = 'm:' THEN u.payload || '#' || "
        + NoticeKey.sql_mac("u.payload")
        + " ELSE u.payload END"
    )
    wake = f", CASE WHEN u.payload IS NOT NULL THEN pg_notify(:channel, {signed}) END"
    return (
        "WITH l AS (SELECT pk, next_seq, done_seq, lease_owner, lease_expires_at, paused, "
        "ready_at, lease_generation, {now} AS at_ms FROM {actors} "
        "WHERE actor_type = :t AND actor_id = :i{for_update}), "
        f"c AS (SELECT l.*, {take} AS take FROM l), "
        "u AS (UPDATE {actors} a SET next_seq = a.next_seq + 1, "
        "ready_at = CASE WHEN c.take THEN c.at_ms ELSE COALESCE(a.ready_at, c.at_ms) END"
        + lease
        + " FROM c WHERE a.pk = c.pk"
        + full
        + " RETURNING a.pk, a.next_seq - 1 AS seq, c.at_ms, "
        f"{payload} AS payload, CASE WHEN c.take THEN a.lease_generation END AS gen"
        + claimed
        + "), "
        f"m AS (INSERT INTO {{messages}} ({MESSAGE_COLUMNS}) SELECT :id, pk, :t, :i, seq, :op, "
        ":args, NULL, 'queued', at_ms, 0, at_ms, :tp, NULL, :sender, :priority FROM u) "
        f"SELECT u.pk, u.seq, u.at_ms, {signed}, u.gen"
        + state
        + (wake if notify else "")
        + (" FROM c LEFT JOIN u ON TRUE" if limited else " FROM u")
    )
