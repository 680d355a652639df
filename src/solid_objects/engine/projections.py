"""Projection tables made ready before a turn of their type commits.

A turn writes its actor's projection row inside its commit, which cannot make a table
(MySQL ends a transaction at DDL). So the table is made, once per process and
definition, before the first turn of the type runs here (the worker's activation
setup) and by ``runtime.install()``; when the table is new or the definition changed,
every actor's row is computed again from its committed state first (a backfill, in
pages that lock the actors' rows, so a turn committing meanwhile writes after it).
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import TYPE_CHECKING, Any

from ..definition import ActorDefinition
from ..errors import ConfigurationError, InvalidArguments, Unauthorized
from ..projections import Found, FoundPage
from ..store import Store, Tx
from ..writes import StagedProjection

if TYPE_CHECKING:
    from .client import Client

log = logging.getLogger("solid_objects.projections")

#: Actors per backfill transaction.
BACKFILL_PAGE = 500


class ProjectionKeeper:
    """Makes each projection table ready; one per worker pool."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._ready: set[str] = set()
        self._lock = threading.Lock()

    def prepare(self, definition: ActorDefinition) -> None:
        """Make ``definition``'s projection table ready (cheap once done)."""
        projections = definition.projections
        if projections is None or projections.spec.fingerprint in self._ready:
            return
        with self._lock:
            spec = projections.spec
            if spec.fingerprint in self._ready:
                return
            if self.store.projections.ensure(spec):
                self.backfill(definition)
                self.store.projections.record(spec)
            self._ready.add(spec.fingerprint)

    def backfill(self, definition: ActorDefinition) -> int:
        """Compute every actor's projection row of ``definition``'s type again; the
        number of rows written."""
        assert definition.projections is not None
        after, written = "", 0
        while True:
            rows, count = self.store.transact(
                functools.partial(self._page, definition=definition, after=after)
            )
            written += count
            if len(rows) < BACKFILL_PAGE:
                return written
            after = rows[-1]

    def _page(self, tx: Tx, *, definition: ActorDefinition, after: str) -> tuple[list[str], int]:
        projections = definition.projections
        assert projections is not None
        statements = self.store.projections
        page = statements.states_after(tx, definition.actor_type, after, BACKFILL_PAGE)
        written = 0
        for actor_id, state, version in page:
            try:
                instance = definition.instantiate(actor_id, definition.load_state(state, version))
                values = projections.row(instance)
            except Exception as exc:  # a state this code cannot read (newer, invalid)
                log.warning(
                    "projection of %s %r not computed: %r",
                    definition.actor_type,
                    actor_id,
                    exc,
                    extra={"solid_action": "projection_skipped"},
                )
                continue
            statements.write(tx, actor_id, StagedProjection(projections.spec, values))
            written += 1
        return [actor_id for actor_id, _, _ in page], written


def find(
    client: Client,
    definition: ActorDefinition,
    where: Any,
    *,
    limit: int,
    cursor: str | None,
    context: Any,
) -> FoundPage:
    """Actors of ``definition``'s type whose projection row matches ``where``, in
    ``actor_id`` order. Each is shown only if the query policy allows reading it (as
    ``snapshot()`` is asked); one it refuses is left out, not reported."""
    projections = definition.projections
    if projections is None:
        raise ConfigurationError(
            f"{definition.actor_type} declares no @projection: there is nothing to find by"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
        raise InvalidArguments(f"limit must be an int from 1 to 1000, not {limit!r}")
    if cursor is not None and not isinstance(cursor, str):
        raise InvalidArguments(f"cursor must be a str from a previous page, not {cursor!r}")
    rows = client.store.projections.find(projections.spec, where, cursor, limit)
    items = []
    for actor_id, values in rows:
        try:
            client.access.authorize("query", context, definition.actor_type, actor_id)
        except Unauthorized:
            continue
        items.append(Found(actor_id, values))
    return FoundPage(items, rows[-1][0] if len(rows) == limit else None)
