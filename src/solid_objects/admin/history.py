"""An actor's history from the per-turn journal: read it, and fork an actor from it.

Only classes that set ``journaled = True`` have a journal (``store/journal.py``).
Reading it is ``actors.history`` (it shows states, so a policy should treat it as
``actors.inspect``); forking writes a new actor and is ``actors.fork``, audited.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..codec import check_identifier
from ..errors import InvalidArguments, NotFound, OperationRefused
from .base import Caller, audit, check_limit, check_reason
from .views import datetime_of, stored_json

if TYPE_CHECKING:
    from ..runtime import Runtime
    from ..store import Tx
    from ..store.journal import JournalRow


@dataclass(frozen=True)
class JournalEntry:
    """One finished turn of a journaled actor: the message, and the state around it."""

    message_id: str
    seq: int
    operation: str
    arguments: Any
    #: completed, rejected or dead.
    status: str
    #: The committed state the turn ran against.
    state_before: Any
    #: The state the turn committed; None when it changed nothing or failed.
    state_after: Any
    state_version: int
    at: datetime | None

    @property
    def state(self) -> Any:
        """The actor's state right after this message: what it committed, or what it
        ran against when it committed no change."""
        return self.state_before if self.state_after is None else self.state_after

    @classmethod
    def of(cls, row: JournalRow) -> JournalEntry:
        """The view of a store row."""
        return cls(
            message_id=row.message_id,
            seq=row.seq,
            operation=row.operation,
            arguments=stored_json(row.arguments),
            status=row.status,
            state_before=stored_json(row.state_before),
            state_after=stored_json(row.state_after),
            state_version=row.state_version,
            at=datetime_of(row.created_at),
        )


@dataclass(frozen=True)
class ForkedActor:
    """What :meth:`ActorHistory.fork_actor` made: a new actor holding a past state."""

    actor_type: str
    actor_id: str
    from_actor_id: str
    #: The message whose state the fork holds (None: the current committed state).
    at_message_id: str | None
    state: Any


class ActorHistory:
    """Part of ``Administration``: the journal's reads and ``fork_actor``."""

    def __init__(self, runtime: Runtime, caller: Caller) -> None:
        self._runtime = runtime
        self._authorize = caller.authorize

    def actor_history(
        self, actor_type: str, actor_id: str, *, limit: int = 50, before_seq: int | None = None
    ) -> list[JournalEntry]:
        """The journal of an actor's current incarnation, newest first (the turns before
        ``before_seq`` when given, for the next page). Empty for a class without
        ``journaled = True``."""
        check_identifier(actor_type, what="actor type")
        check_identifier(actor_id, what="actor id")
        check_limit(limit)
        if before_seq is not None and (
            isinstance(before_seq, bool) or not isinstance(before_seq, int)
        ):
            raise InvalidArguments(f"before_seq must be an int, not {before_seq!r}")
        self._authorize("actors.history", actor_type=actor_type, actor_id=actor_id)
        store = self._runtime.store
        with store.read() as tx:
            row = store.admin.actor_row(tx, actor_type, actor_id)
            if row is None:
                raise NotFound(f"no actor {actor_type} {actor_id!r} (never called, or destroyed)")
            entries = store.journal.of_actor(tx, row.pk, before_seq=before_seq, limit=limit)
        return [JournalEntry.of(e) for e in entries]

    def fork_actor(
        self,
        actor_type: str,
        actor_id: str,
        new_actor_id: str,
        *,
        at_message_id: str | None = None,
        reason: str | None = None,
    ) -> ForkedActor:
        """Make ``new_actor_id`` an independent actor holding ``actor_id``'s state as it
        stood right after message ``at_message_id`` (a journaled turn), or its current
        committed state. Refused when ``new_actor_id`` exists; nothing else is copied
        (no mailbox, reminders or effects)."""
        for value, what in ((actor_type, "actor type"), (actor_id, "actor id")):
            check_identifier(value, what=what)
        check_identifier(new_actor_id, what="new actor id")
        reason = check_reason(reason)
        principal = self._authorize(
            "actors.fork", actor_type=actor_type, actor_id=actor_id, new_actor_id=new_actor_id
        )
        store = self._runtime.store

        def body(tx: Tx) -> tuple[str | None, int]:
            row = store.admin.actor_row(tx, actor_type, actor_id)
            if row is None:
                raise NotFound(f"no actor {actor_type} {actor_id!r} (never called, or destroyed)")
            state, version = row.state, row.state_version
            if at_message_id is not None:
                entry = store.journal.of_message(tx, at_message_id)
                if entry is None or entry.actor_pk != row.pk:
                    raise NotFound(
                        f"message {at_message_id!r} has no journal entry of {actor_type} "
                        f"{actor_id!r} (not journaled, another actor's, or pruned)"
                    )
                state = entry.state_before if entry.state_after is None else entry.state_after
                version = entry.state_version
            if not store.journal.create_actor(tx, actor_type, new_actor_id, state, version):
                raise OperationRefused(
                    f"actor {actor_type} {new_actor_id!r} exists: a fork makes a new actor"
                )
            audit(
                store,
                tx,
                principal,
                "actors.fork",
                "actor",
                f"{actor_type}/{new_actor_id}",
                actor=(actor_type, new_actor_id),
                detail={"from": actor_id, "at_message_id": at_message_id, "reason": reason},
            )
            return state, version

        state, _ = store.transact(body)
        return ForkedActor(actor_type, new_actor_id, actor_id, at_message_id, stored_json(state))
