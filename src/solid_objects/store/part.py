"""The base of the store's parts: one concern's statements over the store's core.

:class:`~solid_objects.store.Store` holds a part per concern (``store.mailbox``,
``store.turns``, ``store.outbox``, ...). A part reaches the core (the dialect, the
transaction helpers, the wake-up channel) through the names below, and another part
through ``self.store.<part>``, so each dependency is named and typed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import Engine

from .dialect import Dialect, Tx

if TYPE_CHECKING:
    from .journal import JournalStatements
    from .notices import NoticeKey
    from .projections import ProjectionStatements
    from .rows import Claimed, Lease, MessageRow
    from .store import Store

T = TypeVar("T")


class StorePart:
    """One concern's statements; ``store`` is the store that holds it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.dialect: Dialect = store.dialect
        self.engine: Engine = store.engine
        self.prefix: str = store.prefix

    # --- the core, as the store has it now (some of it is set after the parts) ----------

    @property
    def publish(self) -> Callable[[str], None] | None:
        return self.store.publish

    @property
    def publish_outcomes(self) -> bool:
        return self.store.publish_outcomes

    @property
    def session_engine(self) -> Engine | None:
        return self.store.session_engine

    @property
    def channel(self) -> str:
        return self.store.channel

    @property
    def notice_key(self) -> NoticeKey:
        return self.store.notice_key

    @property
    def projections(self) -> ProjectionStatements:
        return self.store.projections

    @property
    def journal(self) -> JournalStatements:
        return self.store.journal

    def notify(self, tx: Tx, payload: str) -> None:
        self.store.notify(tx, payload)

    def now(self, tx: Tx) -> int:
        return self.store.now(tx)

    @contextmanager
    def read(self) -> Iterator[Tx]:
        with self.store.read() as tx:
            yield tx

    def transact(self, body: Callable[[Tx], T], *, isolated: bool = True) -> T:
        return self.store.transact(body, isolated=isolated)

    def load_claimed(self, tx: Tx, lease: Lease) -> Claimed | None:
        return self.store.leases.load_claimed(tx, lease)

    def head_message(self, tx: Tx, pk: int, seq: int) -> MessageRow | None:
        return self.store.head_message(tx, pk, seq)
