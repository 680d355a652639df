"""The store layer: schema, dialects and every SQL statement of the library."""

from .dialect import Tx
from .outbox import EffectRow, ReminderRow
from .store import Claimed, Committed, Due, Enqueued, Lease, MessageRow, Store

__all__ = [
    "Claimed",
    "Committed",
    "Due",
    "EffectRow",
    "Enqueued",
    "Lease",
    "MessageRow",
    "ReminderRow",
    "Store",
    "Tx",
]
