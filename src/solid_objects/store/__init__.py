"""The store layer: schema, dialects and every SQL statement of the library."""

from .dialect import Tx
from .store import Claimed, Enqueued, Lease, MessageRow, Store

__all__ = ["Claimed", "Enqueued", "Lease", "MessageRow", "Store", "Tx"]
