"""Reads of committed state: ``snapshot()``, ``@query`` calls, and the state they read.

A query runs on a throwaway instance holding the committed state (the replica's,
within ``replica_max_lag``, when the caller said ``stale_ok``), never in a turn: it
takes no lease, writes nothing, and is refused if it changes the state.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..definition import ActorDefinition, Operation
from ..errors import InvalidArguments, InvalidState, QueryMutatedState
from ..options import Options
from ..store import Store
from .access import Access
from .snapshots import check_include, derived_values


class CommittedReads:
    """``client.reads``: what a caller may read of an actor's committed state."""

    def __init__(
        self, store: Store, options: Options, access: Access, ensure_schema: Callable[[], None]
    ) -> None:
        self.store = store
        self.options = options
        self.access = access
        self.ensure_schema = ensure_schema

    def load_state(
        self, definition: ActorDefinition, actor_id: str, *, stale_ok: bool = False
    ) -> dict[str, Any]:
        self.ensure_schema()
        with self.store.stale_read() if stale_ok else self.store.read() as tx:
            found = self.store.actor_state(tx, definition.actor_type, actor_id)
        if found is None:
            return definition.default_state()
        return definition.load_state(found[0], found[1])

    def snapshot(
        self,
        definition: ActorDefinition,
        actor_id: str,
        *,
        context: Any = None,
        include: Iterable[str] = (),
        stale_ok: bool = False,
    ) -> dict[str, Any]:
        names = check_include(definition, include)
        self.access.authorize("query", context, definition.actor_type, actor_id)
        state = self.load_state(definition, actor_id, stale_ok=stale_ok)
        shown: dict[str, Any] = definition.state.dump_python(state, mode="json")
        if names:
            shown.update(derived_values(self, definition, actor_id, state, names, context=context))
        return shown

    def query(
        self,
        definition: ActorDefinition,
        actor_id: str,
        operation: Operation,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        *,
        context: Any = None,
        stale_ok: bool = False,
    ) -> Any:
        """Run a ``@query`` on a throwaway instance holding the committed state (the
        replica's, within ``replica_max_lag``, when ``stale_ok``)."""
        encoded = operation.encode_arguments(args, kwargs, limit=self.options.max_payload_bytes)
        self.access.authorize(
            "query", context, definition.actor_type, actor_id, operation.name, encoded
        )
        arguments = operation.decode_arguments(encoded)
        state = self.load_state(definition, actor_id, stale_ok=stale_ok)
        instance = definition.instantiate(actor_id, state)
        limit = self.options.max_state_bytes
        before = definition.dump_state(state, limit=limit)
        value = operation.function(instance, **arguments)
        if inspect.isawaitable(value):
            value = asyncio.run(value)  # type: ignore[arg-type]
        try:
            after = definition.dump_state(definition.capture_state(instance), limit=limit)
        except (InvalidArguments, InvalidState):  # changed, and into something invalid
            after = None
        if after != before:
            raise QueryMutatedState(
                f"@query {definition.actor_type}.{operation.name} changed the actor's state; "
                "a query's changes are never committed: make it an operation"
            )
        return operation.decode_result(
            operation.encode_result(value, limit=self.options.max_result_bytes)
        )
