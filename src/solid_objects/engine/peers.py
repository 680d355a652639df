"""Broker-less wake-ups: each process tells its peers directly, by UDP datagram.

With ``wakeup_url="peer://"`` every process (workers and caller-only ones) binds a
UDP socket, writes its address in ``{prefix}peers`` (``store/peers.py``) and renews
it every third of a lease. After a commit, each payload the store would have
notified (``store/notices.py``'s ``w``, ``h:``, ``m:``, ``d:``, ``o:``, ``b:``) is
sent as one datagram: ``h:``/``m:`` to the process holding the actor's lease when
its address is known, everything else to every live peer (this process included,
as PostgreSQL and Redis deliver to their sender too). A finished message is
announced with its signed outcome (``o:``) while the socket is bound to loopback (no
datagram leaves the host), else by its id (``d:``), as through Redis. No server to
run: MariaDB,
and PostgreSQL behind a transaction pooler, get the wake-ups LISTEN cannot give.

Each datagram is the payload signed again with the notice key (``#<mac>``), so a
receiver tells its peers' datagrams from anyone else's. One that does not verify,
oversized or not text, is never data: at most a few per second are handed on as
the plain hints they are (``engine/notices.py`` then reads rows), the rest are
dropped and counted. Datagrams are best effort: a lost one, a peer that is down,
or one whose row expired cost polling latency, never a message.
"""

from __future__ import annotations

import collections
import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Callable

from ..errors import ConfigurationError
from ..options import parse_peer_url
from ..store import Store, Tx
from ..store.notices import MAX_NOTIFY_PAYLOAD, NoticeKey

log = logging.getLogger("solid_objects.wakeup")

#: Largest datagram a peer sends: the longest payload and its outer MAC.
MAX_DATAGRAM = MAX_NOTIFY_PAYLOAD + 1 + 64
#: ``p``: "my address is new, read the peer directory" (sent, signed, at start).
HELLO = "p"
#: Unverified datagrams handed on as hints per second at most (a burst of as many).
UNVERIFIED_PER_SECOND = 20.0
#: Shortest time between two reads of the peer directory a hello asks for (seconds).
_REFRESH_GAP = 0.2

#: Receive buffer asked of the kernel (bytes).
_RECEIVE_BUFFER = 1 << 20

Address = tuple[str, int]


def format_address(host: str, port: int) -> str:
    """``host:port``, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_address(text: str) -> Address | None:
    """The ``(host, port)`` of a directory row, or None when it is not one."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not host:
        return None
    return host.strip("[]"), int(port)


def target_owner(payload: str) -> str | None:
    """The lease owner an ``h:``/``m:`` payload is for (None: everyone's)."""
    if payload[:2] not in ("h:", "m:"):
        return None
    _, _, rest = payload[2:].partition(":")
    owner = rest if payload[0] == "h" else rest.partition(":")[0]
    return owner or None


class PeerWakeup:
    """This process's datagram socket, its row in the peer directory, and the sends."""

    def __init__(
        self,
        store: Store,
        url: str,
        owner: str,
        on_payload: Callable[[str], None],
        ttl_ms: int,
    ) -> None:
        self._store = store
        self._key: NoticeKey = store.notice_key
        self._host, self._port, self._advertise = parse_peer_url(url)
        self._owner = owner
        self._on_payload = on_payload
        self._ttl_ms = ttl_ms
        self._stop = threading.Event()
        self._refresh_now = threading.Event()
        self._threads: list[threading.Thread] = []
        self._sock: socket.socket | None = None
        #: Live peers by owner, replaced whole at each refresh (read without a lock).
        self._peers: dict[str, Address] = {}
        self._tokens = UNVERIFIED_PER_SECOND
        self._tokens_at = time.monotonic()
        self.listening = threading.Event()
        self.connections = 0
        #: ``host:port`` written in the directory (None until started).
        self.address: str | None = None
        #: Datagrams sent / not sent (no socket, or the send failed) / received and
        #: verified / unverified and handed on / unverified and dropped / garbage.
        self.sent = 0
        self.dropped = 0
        self.received = 0
        self.unverified = 0
        self.refused = 0
        self.garbage = 0
        #: The last verified payloads received, newest last (for diagnostics and tests).
        self.recent: collections.deque[str] = collections.deque(maxlen=256)

    @property
    def local_only(self) -> bool:
        """Whether the socket is bound to a loopback address, so no datagram it sends
        leaves this host: then outcomes travel whole (signed ``o:``), not as ids."""
        try:
            return ipaddress.ip_address(self._host).is_loopback
        except ValueError:
            return self._host == "localhost"

    @property
    def peers(self) -> dict[str, str]:
        """Where each live peer is sent to, by owner, as last read from the directory."""
        return {owner: format_address(*address) for owner, address in self._peers.items()}

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        if self._threads:
            return
        self._stop.clear()
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.bind((self._host, self._port))
        except OSError as exc:
            sock.close()
            raise ConfigurationError(
                f"wakeup_url: cannot listen for peers on {self._host}:{self._port} ({exc}); "
                "another process holds the port, or the address is not this host's"
            ) from None
        # Room for a burst while the receiving thread waits for the GIL (the kernel caps
        # it at net.core.rmem_max); what overflows is lost, and polled for.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RECEIVE_BUFFER)
        sock.settimeout(0.5)
        self._sock = sock
        host, port = sock.getsockname()[:2]
        self.address = format_address(self._advertise or host, port)
        for target, name in ((self._receive, "solid-peer-recv"), (self._maintain, "solid-peers")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """Leave the directory (peers stop sending at once), then close the socket."""
        self._stop.set()
        self._refresh_now.set()
        threads, self._threads = self._threads, []
        for thread in threads:
            thread.join(5)
        if self.listening.is_set():
            self.listening.clear()
            try:
                self._store.transact(lambda tx: self._store.peers.forget_peer(tx, self._owner))
            except Exception:  # the row expires by itself
                log.debug("could not remove this process's peer row", exc_info=True)
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    # --- sending --------------------------------------------------------------------------

    def publish(self, payload: str) -> None:
        """Send ``payload`` to the peers that should hear it; called after the commit,
        never blocks (a datagram that cannot leave now is dropped: polling covers)."""
        sock = self._sock
        if sock is None:
            self.dropped += 1
            return
        peers = self._peers
        owner = target_owner(payload)
        targets = [peers[owner]] if owner is not None and owner in peers else peers.values()
        data = self._key.sign(payload).encode()
        for address in targets:
            try:
                sock.sendto(data, socket.MSG_DONTWAIT, address)
                self.sent += 1
            except OSError:  # full buffer, unreachable network, closed socket
                self.dropped += 1

    # --- the directory --------------------------------------------------------------------

    def _maintain(self) -> None:
        """Renew this process's row and re-read the directory every third of a lease,
        or at once when a new peer says hello."""
        period = self._ttl_ms / 3000
        backoff = 0.1
        renewed = -period  # when this process's row was last renewed (monotonic)
        while not self._stop.is_set():
            # A hello asks for a read only: the row is renewed every period, on time.
            renew = time.monotonic() - renewed >= period
            try:
                self._refresh(announce=not self.listening.is_set(), renew=renew)
            except Exception as exc:
                log.warning("cannot update the peer directory (%r); polling covers", exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.1
            last = time.monotonic()
            if renew:
                renewed = last
            self._refresh_now.wait(max(0.0, renewed + period - last))
            self._refresh_now.clear()
            # A flood of hellos reads the table 5 times a second at most.
            self._stop.wait(last + _REFRESH_GAP - time.monotonic())

    def _refresh(self, *, announce: bool, renew: bool = True) -> None:
        address = self.address
        assert address is not None

        def body(tx: Tx) -> list[tuple[str, str]]:
            if renew:
                self._store.peers.advertise_peer(tx, self._owner, address, self._ttl_ms)
            return self._store.peers.live_peers(tx)

        rows = self._store.transact(body)
        self._peers = {owner: found for owner, text in rows if (found := self._resolve(text))}
        if announce:
            self.connections += 1
            self.listening.set()
            self.publish(HELLO)  # everyone (us too) re-reads the directory: we are new
            # Something may have been announced while nobody knew where we were.
            self._on_payload("w")

    def _resolve(self, text: str) -> Address | None:
        """Where to send for a directory row: an address literal as it is, a host name
        looked up here (not in ``publish``, which must not wait on DNS); None when the
        row is malformed or the name does not resolve (that peer is polled for)."""
        parsed = parse_address(text)
        if parsed is None:
            return None
        host, port = parsed
        try:
            ipaddress.ip_address(host)
            return parsed
        except ValueError:
            pass
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        try:
            found = socket.getaddrinfo(host, port, family, socket.SOCK_DGRAM)
        except OSError:
            log.debug("peer address %r does not resolve", text)
            return None
        return (str(found[0][4][0]), int(found[0][4][1])) if found else None

    # --- receiving ------------------------------------------------------------------------

    def _receive(self) -> None:
        sock = self._sock
        assert sock is not None
        while not self._stop.is_set():
            try:
                data = sock.recv(MAX_DATAGRAM + 1)
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                time.sleep(0.05)
                continue
            try:
                self._datagram(data)
            except Exception:  # never let a datagram end the receiver
                log.debug("peer datagram not understood", exc_info=True)

    def _datagram(self, data: bytes) -> None:
        if len(data) > MAX_DATAGRAM:
            self.garbage += 1
            return
        try:
            payload = data.decode("ascii")
        except UnicodeDecodeError:
            self.garbage += 1
            return
        text = self._key.verify(payload)
        if text is not None:
            self.received += 1
            if text == HELLO:
                self._refresh_now.set()
            else:
                self.recent.append(text)
                self._on_payload(text)
        elif self._allow_unverified():
            # Not from a peer of ours: only a hint (the dispatch trusts nothing in it).
            self.unverified += 1
            self._on_payload(payload)
        else:
            self.refused += 1

    def _allow_unverified(self) -> bool:
        now = time.monotonic()
        self._tokens = min(
            UNVERIFIED_PER_SECOND,
            self._tokens + (now - self._tokens_at) * UNVERIFIED_PER_SECOND,
        )
        self._tokens_at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True
