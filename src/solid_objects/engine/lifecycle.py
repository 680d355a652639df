"""Lifecycle hooks: ``on_activate`` before an activation's first turn, ``on_deactivate``
when it ends (idle release, shutdown).

``on_activate`` runs on the freshly hydrated instance, outside any turn (staging and
``current_message`` raise ``NotInTurn`` there); the state it sets is part of the
instance the first turn runs on, so it commits with the first turn that completes.
A failure is a setup failure: the worker's failure path retries the head message
within its attempt budget and dead-letters it after. ``on_deactivate`` is best effort:
exceptions are logged, never raised, and state it changes is not saved.
"""

from __future__ import annotations

import inspect
import logging

from .activation import Activation
from .turn import run_coroutine

log = logging.getLogger("solid_objects.lifecycle")


def _call(instance: object, hook: str) -> None:
    function = getattr(instance, hook, None)
    if function is None:
        return
    value = function()
    if inspect.isawaitable(value):
        run_coroutine(value)


def activate(act: Activation) -> None:
    """Run ``on_activate`` once per activation; raises what the hook raises."""
    if not act.activated:
        _call(act.instance, "on_activate")


def deactivate(act: Activation) -> bool:
    """Run ``on_deactivate`` on an activation that ran ``on_activate``; never raises.

    True when the activation had taken effect (so it ends here, hook or not).
    """
    if not act.activated or act.definition is None:
        return False
    act.activated = False
    try:
        instance = act.instance
        if instance is None:  # dropped after a failed turn: rebuild the committed state
            state = act.definition.load_state(act.state_json, act.state_version)
            instance = act.definition.instantiate(act.actor_id, state)
        _call(instance, "on_deactivate")
    except BaseException as exc:  # best effort: a hook must never break a release
        log.warning(
            "on_deactivate of %s %r failed: %r",
            act.actor_type,
            act.actor_id,
            exc,
            extra={
                "solid_action": "deactivate_failed",
                "actor_type": act.actor_type,
                "actor_id": act.actor_id,
            },
        )
    return True
