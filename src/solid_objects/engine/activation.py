"""An activation: an actor whose lease this process holds, with its hydrated state."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

from ..definition import ActorDefinition
from ..store import Lease, MessageRow


@dataclass(eq=False)
class Activation:
    """The cached, leased form of one actor in one process.

    The instance and ``state_json`` always match the last state this lease
    committed, so the next turn needs no read; the lease fences every commit,
    so a cached activation can never commit over a newer holder.
    """

    lease: Lease
    actor_type: str
    actor_id: str
    state_json: str | None
    state_version: int
    done_seq: int
    head: MessageRow | None
    head_attempt: int
    definition: ActorDefinition | None = None
    instance: Any = None
    status: Literal["idle", "queued", "running"] = "idle"
    signaled: bool = False
    #: Messages enqueued by this process, by sequence number: no read needed to run them.
    inbox: dict[int, MessageRow] = field(default_factory=dict)
    #: Another process may have enqueued: read the mailbox before going idle.
    check_mailbox: bool = True
    last_used: float = field(default_factory=time.monotonic)
    #: How long its latest turn ran: a turn whose commit finds the lease expired is
    #: charged for it only if it ran long enough to have starved the renewals.
    turn_seconds: float = 0.0
    #: ``on_activate`` ran and a turn committed on its instance (see engine.lifecycle).
    activated: bool = False

    @property
    def pk(self) -> int:
        return self.lease.pk
