"""Administration of idle actors: quiet ones, ones the application no longer knows, expiry.

A part of :class:`~solid_objects.admin.Administration`; the SQL is in
:mod:`solid_objects.store.idle`. ``admin.actors`` groups the actor operations under
the names of their actions (``admin.actors.quiet(since=...)`` is ``quiet_actors``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..codec import check_identifier
from ..errors import InvalidArguments
from ..store.admin_rows import AuditRecord
from ..store.store import new_id
from .base import BATCH, Caller, check_limit, decode_cursor, log, page_of, summary_of
from .views import ActorSummary, ExpiryReport, Page, datetime_of, iso_of

if TYPE_CHECKING:
    from ..runtime import Runtime
    from ..store import Tx
    from ..store.admin_rows import ActorRow
    from .api import Administration
    from .views import ActorDetail, ActorPause

#: Actors read per statement while looking for orphans.
_SCAN = 1000


def _cutoff(since: timedelta | datetime, now: int) -> int:
    """``since`` as epoch ms: a quiet period before ``now``, or a point in time."""
    if isinstance(since, timedelta):
        if since < timedelta(0):
            raise InvalidArguments("since must be a non-negative timedelta, or a datetime")
        return now - int(since.total_seconds() * 1000)
    if isinstance(since, datetime):
        moment = since if since.tzinfo is not None else since.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)
    raise InvalidArguments(
        f"since is a datetime.timedelta (quiet that long) or a datetime, not {since!r}"
    )


class IdleActors:
    """The administration API's view of quiet actors: listing them, the orphans of the
    application's own ids, and expiring idle state (``state_ttl``).
    """

    def __init__(self, runtime: Runtime, caller: Caller) -> None:
        self._runtime = runtime
        self._authorize = caller.authorize

    def quiet_actors(
        self,
        since: timedelta | datetime,
        *,
        actor_type: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[ActorSummary]:
        """Actors with no pending work, untouched ``since`` (a timedelta: that long ago).

        No pending work: not paused, an empty mailbox, no delayed message, no reminder,
        no effect still to run. Untouched: no message claimed or run, no pause or
        resume (queries do not count). By (type, id), keyset-paged.
        """
        if not isinstance(since, timedelta | datetime):
            _cutoff(since, 0)  # raises the error that says what since may be
        if actor_type is not None:
            check_identifier(actor_type, what="actor type")
        check_limit(limit)
        after = decode_cursor(cursor, "quiet")
        self._authorize("actors.quiet", actor_type=actor_type, since=str(since))
        store = self._runtime.store
        with store.read() as tx:
            now = store.now(tx)
            rows = store.idle.quiet_actors(
                tx,
                actor_type=actor_type,
                cutoff=_cutoff(since, now),
                after=None if after is None else (str(after[0]), str(after[1])),
                limit=limit + 1,
            )
        rows, next_cursor = page_of(
            rows, limit, "quiet", lambda last: [last.actor_type, last.actor_id]
        )
        return Page([summary_of(r, now) for r in rows], next_cursor, datetime_of(now))

    def orphans_of(
        self, actor_type: str, owner_ids: Iterable[str], limit: int, cursor: str | None
    ) -> Page[ActorSummary]:
        """Actors of ``actor_type`` whose id is not among ``owner_ids``, by id."""
        check_identifier(actor_type, what="actor type")
        if isinstance(owner_ids, str | bytes) or not isinstance(owner_ids, Iterable):
            raise InvalidArguments(
                f"owner_ids is a collection of the application's ids (str), not {owner_ids!r}"
            )
        known = set()
        for owner_id in owner_ids:
            if not isinstance(owner_id, str):
                raise InvalidArguments(
                    f"owner_ids must all be str (actor ids are text), not {owner_id!r}"
                )
            known.add(owner_id)
        check_limit(limit)
        after = decode_cursor(cursor, "orphans")
        if after is not None and not isinstance(after, str):
            raise InvalidArguments("not a valid cursor")
        self._authorize("orphans.list", actor_type=actor_type, owner_ids=len(known))
        store = self._runtime.store
        found: list[ActorRow] = []
        with store.read() as tx:
            now = store.now(tx)
            while len(found) <= limit:
                batch = store.idle.actors_after(tx, actor_type, after, _SCAN)
                found.extend(r for r in batch if r.actor_id not in known)
                if len(batch) < _SCAN:
                    break
                after = batch[-1].actor_id
        rows, next_cursor = page_of(found, limit, "orphans", lambda last: last.actor_id)
        return Page([summary_of(r, now) for r in rows], next_cursor, datetime_of(now))

    def expire_actors(
        self,
        *,
        actor_type: str | None = None,
        dry_run: bool = False,
        progress: Callable[[str, int], None] | None = None,
    ) -> ExpiryReport:
        """Delete actors untouched for their type's ``state_ttl``; ``dry_run`` counts them.

        Opt-in per type (``Runtime(state_ttl={"Session": 30 * 86400})``); ``actor_type``
        limits it to one of those. A candidate is quiet (see :meth:`quiet_actors`), holds
        no live lease and has no open dead letter; it is deleted as ``destroy`` would,
        its state gone, with an audit record each (``actors.expire``). Rows are checked
        again under a lock in the deleting transaction, ``BATCH`` at a time;
        ``progress(actor_type, deleted)`` after each.
        """
        ttl = dict(self._runtime.options.state_ttl or {})
        if actor_type is not None:
            check_identifier(actor_type, what="actor type")
            if actor_type not in ttl:
                raise InvalidArguments(
                    f"{actor_type} has no state_ttl: expiry is opt-in, per type "
                    f"(Runtime(state_ttl={{{actor_type!r}: seconds}})); configured: {sorted(ttl)}"
                )
            ttl = {actor_type: ttl[actor_type]}
        action = "retention.preview" if dry_run else "actors.expire"
        principal = self._authorize(action, actor_type=actor_type, expire=True)
        store = self._runtime.store
        with store.read() as tx:
            now = store.now(tx)
        cutoffs = {t: now - int(seconds * 1000) for t, seconds in sorted(ttl.items())}
        counts: dict[str, int] = {}
        for kind, cutoff in cutoffs.items():
            if dry_run:
                with store.read() as tx:
                    counts[kind] = store.idle.count_expirable(tx, kind, cutoff)
                continue
            counts[kind] = self._expire_type(principal, kind, cutoff, ttl[kind], progress)
        return ExpiryReport(
            datetime_of(now), dry_run, counts, {t: datetime_of(c) for t, c in cutoffs.items()}
        )

    def _expire_type(
        self,
        principal: str,
        actor_type: str,
        cutoff: int,
        seconds: float,
        progress: Callable[[str, int], None] | None,
    ) -> int:
        store = self._runtime.store
        deleted = 0
        after: str | None = None
        while True:
            with store.read() as tx:
                batch = store.idle.expirable(tx, actor_type, cutoff, after=after, limit=BATCH)
            if not batch:
                return deleted
            after = batch[-1][1]

            def body(tx: Tx, pks: Sequence[int] = [pk for pk, _ in batch]) -> int:
                gone = store.idle.expire(tx, cutoff, pks)
                detail = {"state_ttl_s": seconds, "untouched_before": iso_of(cutoff)}
                store.admin.write_audits(
                    tx,
                    [
                        AuditRecord(
                            audit_id=new_id(),
                            principal=principal,
                            action="actors.expire",
                            target_kind="actor",
                            target_id=f"{kind}/{actor_id}"[:255],
                            actor_type=kind,
                            actor_id=actor_id,
                            detail=detail,
                        )
                        for kind, actor_id in gone
                    ],
                )
                return len(gone)

            n = int(store.transact(body))
            deleted += n
            if n:
                log.info(
                    "%s expired %d %s actors",
                    principal,
                    n,
                    actor_type,
                    extra={"solid_action": "actors_expired", "principal": principal},
                )
            if progress is not None:
                progress(actor_type, deleted)

class ActorOperations:
    """``admin.actors``: ``list``, ``inspect``, ``pending``, ``states``, ``quiet``,
    ``orphans``, ``pause``, ``resume``, ``destroy``, ``expire``; each is the method of
    the same action (``actors.quiet`` is ``quiet_actors``), on the same principal."""

    def __init__(self, admin: Administration) -> None:
        self._admin = admin

    def list(self, actor_type: str, **kw: Any) -> Page[ActorSummary]:
        """The actors of a type, by id: :meth:`Administration.actors`."""
        return self._admin.list_actors(actor_type, **kw)

    def inspect(self, actor_type: str, actor_id: str, **kw: Any) -> ActorDetail:
        """One actor in detail: :meth:`Administration.inspect`."""
        return self._admin.inspect_actor(actor_type, actor_id, **kw)

    def pending(self, **kw: Any) -> Page[ActorSummary]:
        """Actors with queued messages: :meth:`Administration.pending`."""
        return self._admin.actors_with_pending_work(**kw)

    def states(self, actor_type: str, actor_ids: Sequence[str]) -> dict[str, Any]:
        """Committed states of several actors at once: :meth:`Administration.actor_states`."""
        return self._admin.actor_states(actor_type, actor_ids)

    def quiet(self, since: timedelta | datetime, **kw: Any) -> Page[ActorSummary]:
        """Actors untouched since a time: :meth:`Administration.quiet_actors`."""
        return self._admin.quiet_actors(since, **kw)

    def orphans(self, actor_type: str, owner_ids: Iterable[str], **kw: Any) -> Page[ActorSummary]:
        """Actors whose id the application no longer knows: :meth:`Administration.orphans`."""
        return self._admin.orphans(actor_type, owner_ids, **kw)

    def pause(self, actor_type: str, actor_id: str, **kw: Any) -> ActorPause:
        """Hold an actor's mailbox: :meth:`Administration.pause_actor`."""
        return self._admin.pause_actor(actor_type, actor_id, **kw)

    def resume(self, actor_type: str, actor_id: str, **kw: Any) -> ActorPause:
        """Let a paused actor run again: :meth:`Administration.resume_actor`."""
        return self._admin.resume_actor(actor_type, actor_id, **kw)

    def destroy(self, actor_type: str, actor_id: str, **kw: Any) -> bool:
        """Destroy an actor: :meth:`Administration.destroy_actor`."""
        return self._admin.destroy_actor(actor_type, actor_id, **kw)

    def expire(self, **kw: Any) -> ExpiryReport:
        """Delete idle actors past their ``state_ttl``: :meth:`Administration.expire_actors`."""
        return self._admin.expire_actors(**kw)
