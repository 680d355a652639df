"""The administration API: ``runtime.admin``, one object composed of parts.

Each part holds what it needs, given explicitly: the runtime and the view's
:class:`~solid_objects.admin.base.Caller` (who asks, and the policy that decides).
``Administration`` builds the parts of one view and offers their methods under
the names of the API; the parts never reach into each other except through
what they were handed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

from .base import Caller, Listings, SharedPolicy
from .failures import Failures
from .flow import FlowControl
from .history import ActorHistory
from .idle import ActorOperations, IdleActors
from .inspection import Inspection
from .maintenance import Maintenance
from .policy import Policy, deny_all

if TYPE_CHECKING:
    from ..runtime import Runtime


class Administration:
    """Inspect and repair a runtime's actors; ``runtime.admin``.

    ``runtime.admin`` carries the application's policy (``set_policy``) and no
    principal; ``runtime.admin.as_principal(name)`` returns a view that acts as
    ``name``. Views share the policy of the runtime, so changing it applies to
    every view at once.

    The methods are those of its parts: :class:`~solid_objects.admin.inspection.Inspection`
    (status, activity, actors, audit), :class:`~solid_objects.admin.failures.Failures`
    (dead letters, effects), :class:`~solid_objects.admin.maintenance.Maintenance`
    (pauses, reminders, processes, retention), :class:`~solid_objects.admin.idle.IdleActors`
    (quiet actors, expiry), :class:`~solid_objects.admin.history.ActorHistory` (journal,
    fork) and :class:`~solid_objects.admin.flow.FlowControl` (limits).
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        policy: Policy = deny_all,
        principal: str | None = None,
        _shared: SharedPolicy | None = None,
    ) -> None:
        self._runtime = runtime
        shared = _shared if _shared is not None else SharedPolicy(policy)
        self._caller = caller = Caller(shared, principal, runtime.kernel.ensure_schema)
        self.allowed = caller.allowed
        self.set_policy = caller.set_policy
        listings = Listings(runtime.store, runtime.options.replica_for_admin)

        inspection = Inspection(runtime, caller, listings)
        self.status = inspection.status
        self.activity = inspection.activity
        self.list_actors = inspection.list_actors
        self.inspect_actor = inspection.inspect_actor
        self.actor_messages = inspection.actor_messages
        self.retrying_messages = inspection.retrying_messages
        self.audit_log = inspection.audit_log

        failures = Failures(runtime, caller, listings)
        self.list_dead_letters = failures.list_dead_letters
        self.get_dead_letter = failures.get_dead_letter
        self.retry_dead_letter = failures.retry_dead_letter
        self.retry_dead_letters = failures.retry_dead_letters
        self.discard_dead_letter = failures.discard_dead_letter
        self.discard_dead_letters = failures.discard_dead_letters
        self.list_effects = failures.list_effects
        self.get_effect = failures.get_effect
        self.retry_effect = failures.retry_effect
        self.retry_effects = failures.retry_effects

        idle = IdleActors(runtime, caller)
        self.quiet_actors = idle.quiet_actors
        self.expire_actors = idle.expire_actors

        maintenance = Maintenance(runtime, caller, idle, listings)
        self.pause_actor = maintenance.pause_actor
        self.resume_actor = maintenance.resume_actor
        self.destroy_actor = maintenance.destroy_actor
        self.cancel_message = maintenance.cancel_message
        self.try_cancel_message = maintenance.try_cancel_message
        self.actors_with_pending_work = maintenance.actors_with_pending_work
        self.actor_states = maintenance.actor_states
        self.orphans = maintenance.orphans
        self.list_reminders = maintenance.list_reminders
        self.pause_reminder = maintenance.pause_reminder
        self.resume_reminder = maintenance.resume_reminder
        self.cancel_reminder = maintenance.cancel_reminder
        self.run_reminder_now = maintenance.run_reminder_now
        self.list_processes = maintenance.list_processes
        self.recover_process = maintenance.recover_process
        self.prune = maintenance.prune

        history = ActorHistory(runtime, caller)
        self.actor_history = history.actor_history
        self.fork_actor = history.fork_actor

        flow = FlowControl(runtime, caller)
        self.effect_limits = flow.effect_limits
        self.turn_limits = flow.turn_limits

    @property
    def policy(self) -> Policy:
        """The policy every view of this runtime's API asks."""
        return self._caller.shared.policy

    @property
    def principal(self) -> str | None:
        """Who this view acts as (None for ``runtime.admin`` itself)."""
        return self._caller.principal

    def as_principal(self, principal: str) -> Self:
        """A view of this API acting as ``principal`` (who the policy and the audit see)."""
        return type(self)(self._runtime, principal=principal, _shared=self._caller.shared)

    @property
    def actors(self) -> ActorOperations:
        """The actor operations named as their actions: ``admin.actors.quiet(since=...)``."""
        return ActorOperations(self)
