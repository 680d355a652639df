"""SQL of the peer directory: where each process of a ``peer://`` deployment listens.

:class:`PeerStatements` is mixed into :class:`~solid_objects.store.Store`.

Every process that wakes its peers directly (``wakeup_url="peer://"``), workers
and caller-only processes alike, keeps one row of ``{prefix}peers``: its owner,
the ``host:port`` of its datagram socket and when the row expires on the database
clock. It renews the row on its own schedule, so a caller-only process (which has
no row in the process registry) is reachable for the outcomes it waits for. A row
whose ``expires_at`` passed names a process that is gone or cut off: nobody sends
to it. The rows decide nothing but where a wake-up is sent.
"""

from __future__ import annotations

from .dialect import Tx
from .part import StorePart

#: How long an expired row is kept before a renewing peer deletes it (ms).
_KEEP_EXPIRED_MS = 3_600_000


class PeerStatements(StorePart):
    """``store.peers``: statements over ``{peers}``."""

    def _peers(self, template: str) -> str:
        return template.replace("{peers}", f"{self.prefix}peers")

    def advertise_peer(self, tx: Tx, owner: str, address: str, ttl_ms: int) -> None:
        """Write (or renew) this process's address, valid for ``ttl_ms``; delete rows
        expired an hour ago (stopped or killed peers)."""
        params = {"owner": owner, "address": address[:300], "ttl": ttl_ms}
        renewed = tx.run(
            self._peers(
                "UPDATE {peers} SET address = :address, expires_at = {now} + :ttl "
                "WHERE owner = :owner"
            ),
            params,
        )
        if renewed == 0:
            tx.run(
                self._peers(
                    "INSERT INTO {peers} (owner, address, expires_at) "
                    "VALUES (:owner, :address, {now} + :ttl)"
                ),
                params,
            )
        tx.run(
            self._peers("DELETE FROM {peers} WHERE expires_at < {now} - :keep"),
            {"keep": _KEEP_EXPIRED_MS},
        )

    def live_peers(self, tx: Tx) -> list[tuple[str, str]]:
        """``(owner, address)`` of every peer whose row has not expired."""
        return [
            (str(owner), str(address))
            for owner, address in tx.rows(
                self._peers("SELECT owner, address FROM {peers} WHERE expires_at > {now}")
            )
        ]

    def forget_peer(self, tx: Tx, owner: str) -> None:
        """Remove this process's row (a clean stop): peers stop sending at once."""
        tx.run(self._peers("DELETE FROM {peers} WHERE owner = :owner"), {"owner": owner})
