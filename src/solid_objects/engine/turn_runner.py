"""Running one turn of a held activation: hydrate the instance, execute the message
outside any transaction, and time the operation.

Worker threads and direct turns both run turns through a :class:`TurnRunner`; the
commit that follows is theirs (``batch_commit``, ``direct``).
"""

from __future__ import annotations

import functools
import logging
import time

from ..observability.events import log_fields
from ..options import Options
from ..registry import NamedHandlers, Registry
from ..reminders import CommittedReminder
from ..store import MessageRow, Store
from .activation import Activation
from .batch_commit import last_error
from .lifecycle import activate
from .projections import ProjectionKeeper
from .turn import Limits, TurnOutcome, execute, failure

log = logging.getLogger("solid_objects.worker")

#: The most reminders ``self.reminders()`` reads of one actor.
MAX_REMINDERS_READ = 10_000


class TurnRunner:
    """Runs turns, and remembers how long each operation's turns take here."""

    def __init__(
        self, store: Store, registry: Registry, actions: NamedHandlers, options: Options
    ) -> None:
        self.store = store
        self.registry = registry
        self.actions = actions
        self.options = options
        self.limits = Limits(options.max_result_bytes, options.max_state_bytes)
        #: Projection tables made ready before a turn of their type runs here.
        self.projections = ProjectionKeeper(store)
        #: (actor type, operation) -> a decaying maximum of its turns' run time (s).
        self._turn_seconds: dict[tuple[str, str], float] = {}

    def run(
        self, act: Activation, message: MessageRow, committed_state: str | None = None
    ) -> TurnOutcome:
        """Run one turn; ``committed_state`` is the state before it (default: the
        activation's last committed state; in a chain, the previous turn's)."""
        act.turn_seconds = 0.0
        if act.head_attempt > self.options.max_attempts:
            last = last_error(message)
            return failure(
                RuntimeError(
                    f"message started {act.head_attempt - 1} times without finishing: "
                    + (
                        f"the last recorded failure: {last}"
                        if last
                        else "the worker running it crashed or lost its lease each time"
                    )
                ),
                deterministic=True,
            )
        if act.instance is None:
            error = self._setup(act)
            if error is not None:
                log.warning(
                    "setup of %s %r failed: %r",
                    act.actor_type,
                    act.actor_id,
                    error,
                    extra={"solid_action": "setup_failed", **log_fields(message, act.head_attempt)},
                )
                return failure(error, deterministic=False)
        assert act.definition is not None
        began = time.monotonic()
        ran_against = act.state_json if committed_state is None else committed_state
        outcome = execute(
            act.definition,
            act.instance,
            ran_against,
            message,
            self.limits,
            self.actions.names(),
            act.head_attempt,
            functools.partial(self._committed_reminders, act.pk),
        )
        took = act.turn_seconds = time.monotonic() - began
        self.record_turn_seconds(act.actor_type, message.operation, took)
        outcome.ran_against = ran_against
        return outcome

    def record_turn_seconds(self, actor_type: str, operation: str, seconds: float) -> None:
        """Fold one turn's run time into the operation's decaying maximum."""
        key = (actor_type, operation)
        self._turn_seconds[key] = max(seconds, self._turn_seconds.get(key, seconds) / 2)

    def fits(self, actor_type: str, operation: str, deadline: float | None) -> bool:
        """Whether a turn of ``operation`` can be expected to end well before
        ``deadline`` (monotonic): its recent turns here took under a quarter of the
        time left.

        An operation this process has not run yet has no such evidence: a worker runs
        it (and times it) while the caller waits no longer than its deadline, whether
        the timeout is the call's own or ``call_timeout``."""
        if deadline is None:
            return True
        took = self._turn_seconds.get((actor_type, operation))
        return took is not None and took * 4 <= deadline - time.monotonic()

    def _setup(self, act: Activation) -> BaseException | None:
        """Hydrate the instance; an error here is a setup failure with an attempt budget."""
        try:
            definition = self.registry.get(act.actor_type)
            self.projections.prepare(definition)
            state = definition.load_state(act.state_json, act.state_version)
            act.definition = definition
            act.instance = definition.instantiate(act.actor_id, state)
            activate(act)
        except Exception as exc:
            act.instance = None  # on_activate failed: hydrate and run it again next time
            return exc
        return None

    def _committed_reminders(self, actor_pk: int) -> list[CommittedReminder]:
        """What ``self.reminders()`` reads: the incarnation's committed reminders."""
        with self.store.read() as tx:
            rows = self.store.outbox.reminders_for(tx, actor_pk, MAX_REMINDERS_READ)
        return [
            (r.operation, r.key, r.due_at, r.every_ms, r.cron, r.timezone, r.arguments)
            for r in rows
        ]
