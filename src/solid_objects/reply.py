"""``solid_objects.Reply``: the answer to a request one actor made of another.

``self.request(Other, id, reply_to=self.on_answer, timeout=...).operation(...)`` stages
a message whose outcome comes back later as a message to ``on_answer(reply: Reply)``:
the actor never waits for another mailbox inside a turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .errors import ReplyFailed

ReplyStatus = Literal["completed", "rejected", "failed", "destroyed", "timed_out"]


@dataclass(frozen=True)
class Reply:
    """The one outcome of a request, delivered to the asker's ``reply_to`` operation.

    ``status``: ``completed`` (``result`` is the target operation's result),
    ``rejected`` (it raised ``Rejected``; ``error`` has its ``code``, ``message`` and
    ``details``), ``failed`` (dead-lettered: ``error`` has ``type`` and ``message``),
    ``destroyed`` (the target or the message was destroyed), ``timed_out`` (no
    answer before the request's timeout; a later answer is dropped). ``context`` is
    the value given at request time, ``request_id`` what ``request`` returned.
    """

    request_id: str
    status: ReplyStatus
    target_type: str
    target_id: str
    operation: str
    result: Any = None
    error: dict[str, Any] | None = None
    context: Any = None

    @property
    def ok(self) -> bool:
        """Whether the target operation completed."""
        return self.status == "completed"

    def value(self) -> Any:
        """The result of a completed request; raises :class:`ReplyFailed` otherwise."""
        if self.status != "completed":
            raise ReplyFailed(self)
        return self.result
