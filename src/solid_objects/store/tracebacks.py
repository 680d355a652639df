"""Writing the traceback of a failed attempt beside its stored error.

Apart from the turn and effect commit statements on purpose: a failure is rare,
so one more ``UPDATE`` in the same transaction costs nothing on the hot path,
and the fenced commit statements keep their shape.
"""

from __future__ import annotations

from typing import Literal

from .dialect import Tx
from .part import StorePart


class TracebackStatements(StorePart):
    """``store.tracebacks``: a failure's traceback kept with its message or effect."""

    def record_traceback(
        self, tx: Tx, kind: Literal["messages", "effects"], row_id: str, text: str | None
    ) -> None:
        """Store ``text`` (None clears it) as the traceback of message or effect ``row_id``,
        in the transaction that records the attempt's outcome."""
        tx.run(
            "UPDATE {" + kind + "} SET traceback = :tb WHERE id = :id",
            {"tb": text, "id": row_id},
        )
