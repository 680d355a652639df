"""Cross-process wake-ups: PostgreSQL ``LISTEN/NOTIFY``, Redis Pub/Sub, or peers.

Commits that another process may be waiting for announce themselves: ``w``
when an actor has new work nobody here holds, ``d:<id>`` when a message
finished. On PostgreSQL ``pg_notify`` is sent *inside* the committing
transaction (delivered only if it commits). With ``wakeup_url`` (any
database; the way for MySQL/MariaDB) the store hands each payload to
:class:`RedisWakeup` *after* the commit, which publishes it from a thread of
its own. Either way one subscribing connection per runtime, outside the pool,
hands each payload to ``engine/notices.py`` (which acts on it; the payloads
themselves are ``store/notices.py``'s). With ``wakeup_url="peer://"`` processes
send each other datagrams instead (``engine/peers.py``). Polling stays the
durable fallback: a lost notification, or a broker that is down, only costs
latency.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Engine, text

from ..errors import ConfigurationError
from .peers import PeerWakeup

if TYPE_CHECKING:
    from ..store import Store

log = logging.getLogger("solid_objects.wakeup")

#: How long a new LISTEN connection waits for its probe NOTIFY (seconds).
PROBE_WAIT = 2.0

#: Longest wait between two attempts to reach a broker that is down (seconds).
_MAX_BACKOFF = 5.0


class Listener(Protocol):
    """What the runtime starts and stops: one subscribing connection per process."""

    listening: threading.Event
    #: Connections made so far: one that stayed up missed no payload.
    connections: int

    def start(self) -> None: ...

    def stop(self) -> None: ...


def listener_for(
    store: Store,
    wakeup_url: str | None,
    on_payload: Callable[[str], None],
    direct: Engine | None = None,
    owner: str | None = None,
    ttl_ms: int = 30_000,
) -> Listener | None:
    """The wake-up path of a runtime: peers or Redis if configured, else NOTIFY on
    PostgreSQL.

    With peers (``peer://``, ``engine/peers.py``) or Redis, the store is told to
    publish after each commit instead of notifying; ``owner`` names this process in
    the peer directory, whose row lives ``ttl_ms`` unless renewed.
    Other databases without ``wakeup_url`` have no listener: they poll. LISTEN runs on
    ``direct`` (``listen_url``) when given; behind a transaction pooler without it
    there is no listener: a LISTEN there lands on a server session the pooler hands
    to other clients, and this process would never hear a NOTIFY while believing it
    listens (:func:`wakeup_path` says so).
    """
    if wakeup_url is not None and wakeup_url.startswith("peer:"):
        if owner is None:
            raise ConfigurationError("peer wake-ups need the owner of this process")
        peers = PeerWakeup(store, wakeup_url, owner, on_payload, ttl_ms)
        store.publish = peers.publish
        store.publish_outcomes = peers.local_only
        return peers
    if wakeup_url is not None:
        redis = RedisWakeup(wakeup_url, lambda: store.channel, on_payload)
        store.publish = redis.publish
        return redis
    if store.dialect.notify_sql is None:
        return None
    if direct is not None:
        return PostgresListener(direct, lambda: store.channel, on_payload, store.engine)
    if store.dialect.pooled:
        log.warning(
            "pooler='transaction' and no listen_url: LISTEN cannot work through the "
            "pooler, so wake-ups from other processes are polled; give listen_url "
            "(a URL reaching PostgreSQL directly) to be woken at once"
        )
        return None
    return PostgresListener(store.engine, lambda: store.channel, on_payload)


def wakeup_path(store: Store, wakeup_url: str | None, direct: Engine | None) -> str:
    """Which wake-up path :func:`listener_for` chose, and why (for the doctor)."""
    if wakeup_url is not None and wakeup_url.startswith("peer:"):
        return "datagrams between peers (wakeup_url=peer://), polling as fallback"
    if wakeup_url is not None:
        return "Redis Pub/Sub (wakeup_url)"
    if store.dialect.notify_sql is None:
        return f"polling: {store.dialect.name} has no LISTEN/NOTIFY (set wakeup_url for Redis)"
    if direct is not None:
        return "LISTEN/NOTIFY on a direct connection (listen_url)"
    if store.dialect.pooled:
        return (
            "polling: pooler='transaction' and no listen_url (LISTEN through a "
            "transaction pooler would hear nothing)"
        )
    return "LISTEN/NOTIFY on the database connection"


class PostgresListener:
    """LISTEN on a connection of ``engine``'s; its probe NOTIFY goes through
    ``notify_engine`` (the runtime's own, when LISTEN runs on ``listen_url``), the
    path every real wake-up takes, so a listen_url that reaches another database
    is found too."""

    def __init__(
        self,
        engine: Engine,
        channel: Callable[[], str],
        on_payload: Callable[[str], None],
        notify_engine: Engine | None = None,
    ) -> None:
        self._engine = engine
        self._notify_engine = notify_engine or engine
        self._channel = channel
        self._on_payload = on_payload
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.listening = threading.Event()
        self.connections = 0
        #: Payloads heard so far (for diagnostics and tests).
        self.received = 0
        #: A probe NOTIFY from another connection was heard once / was not (then the
        #: listener has stopped: the process polls, and the doctor warns).
        self.proven = False
        self.deaf = False

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="solid-listen", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(5)

    def _connect(self) -> Any:
        # A new connection made the way every library connection is (an application
        # engine's connect_args and listeners included, database.py), not rebuilt from
        # the URL; from a copy of the pool, so it is fresh (never a pooled one that died
        # with the server) and detached for good.
        proxied = self._engine.pool.recreate().connect()
        conn: Any = proxied.driver_connection
        proxied.detach()
        conn.rollback()
        conn.autocommit = True
        conn.execute(f'LISTEN "{self._channel()}"')
        return conn

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                conn = self._connect()
                heard = self.proven or self._probe(conn)
            except Exception as exc:
                log.warning("cannot LISTEN (%r); polling only, retrying in %.1fs", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            if not heard and self._stop.is_set():  # stopped while probing: no finding
                _close(conn)
                return
            if not heard:
                self.deaf = True
                log.warning(
                    "LISTEN heard no NOTIFY sent from another connection within %gs: "
                    "something between this process and PostgreSQL (a transaction "
                    "pooler such as PgBouncer?) does not keep the listening session. "
                    "Wake-ups from other processes are polled; set pooler='transaction' "
                    "and listen_url (a direct URL) to be woken at once",
                    PROBE_WAIT,
                )
                _close(conn)
                return
            self.proven = True
            backoff = 0.1
            self.connections += 1
            self.listening.set()
            # Something may have been notified while we were not listening.
            self._on_payload("w")
            try:
                while not self._stop.is_set():
                    for notify in conn.notifies(timeout=1.0):
                        self.received += 1
                        self._on_payload(notify.payload)
            except Exception as exc:
                log.warning("LISTEN connection lost (%r); reconnecting", exc)
                time.sleep(0.05)
            finally:
                self.listening.clear()
                _close(conn)

    def _probe(self, conn: Any) -> bool:
        """Whether a NOTIFY sent from another connection reaches this one: LISTEN
        through a transaction pooler succeeds, yet lands on a server session that
        is not this client's, and would hear nothing while seeming to listen."""
        channel = f"{self._channel()}_probe_{uuid.uuid4().hex[:12]}"
        conn.execute(f'LISTEN "{channel}"')
        with self._notify_engine.connect() as other:
            other.execute(text("SELECT pg_notify(:channel, 'probe')"), {"channel": channel})
            other.commit()
        deadline = time.monotonic() + PROBE_WAIT
        heard = False
        while not heard and not self._stop.is_set() and (left := deadline - time.monotonic()) > 0:
            for notify in conn.notifies(timeout=min(left, 0.1)):
                if notify.channel == channel:
                    heard = True
                    break
                self.received += 1  # a real wake-up that came first: keep it
                self._on_payload(notify.payload)
        conn.execute(f'UNLISTEN "{channel}"')
        # A no-op, so the session's last statement says what it does (pg_stat_activity).
        conn.execute(f'LISTEN "{self._channel()}"')
        return heard


def _import_redis() -> Any:
    try:
        import redis
    except ImportError:
        raise ConfigurationError(
            "wakeup_url needs the redis package: pip install 'solid-objects[redis]'"
        ) from None
    return redis


class RedisWakeup:
    """Wake-ups through Redis Pub/Sub, published after the database commit.

    Redis is not transactional with the database, so a payload is published only
    once its transaction committed (``Store.publish``), from a publisher thread: a
    commit never waits on Redis and never fails because of it. A subscriber thread
    holds one connection per process. While Redis is unreachable, payloads are
    dropped (counted in ``dropped``) and both threads retry with a backoff up to
    5 s, logging the outage once; every (re)subscription wakes the poller, since
    work may have been announced while nobody listened.
    """

    def __init__(
        self, url: str, channel: Callable[[], str], on_payload: Callable[[str], None]
    ) -> None:
        self._redis = _import_redis()
        self._url = url
        self._channel = channel
        self._on_payload = on_payload
        self._stop = threading.Event()
        self._subscriber: threading.Thread | None = None
        self._publisher: threading.Thread | None = None
        self._outbox: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.listening = threading.Event()
        self.connections = 0
        #: Payloads handed to Redis / dropped while it was unreachable / received.
        self.published = 0
        self.dropped = 0
        self.received = 0
        #: The last payloads received, newest last (for diagnostics and tests).
        self.recent: collections.deque[str] = collections.deque(maxlen=256)

    def start(self) -> None:
        if self._subscriber is None:
            self._stop.clear()
            self._subscriber = threading.Thread(
                target=self._subscribe, name="solid-redis-sub", daemon=True
            )
            self._subscriber.start()
        self._ensure_publisher()

    def stop(self) -> None:
        """Stop subscribing; publish what is already queued, then stop publishing."""
        self._stop.set()
        with self._lock:
            publisher, self._publisher = self._publisher, None
        if publisher is not None:
            self._outbox.put(None)
            publisher.join(5)
        subscriber, self._subscriber = self._subscriber, None
        if subscriber is not None:
            subscriber.join(5)

    def publish(self, payload: str) -> None:
        """Queue ``payload`` for publication; called after the commit, never blocks."""
        self._ensure_publisher()
        self._outbox.put(payload)

    def ping(self) -> None:
        """Raise unless the Redis server answers now (for the doctor)."""
        client = self._client()
        try:
            client.ping()
        finally:
            client.close()

    def _client(self, **options: Any) -> Any:
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # Failures surface at once: the loops below own retries, backoff and logging.
        return self._redis.Redis.from_url(
            self._url, socket_connect_timeout=2.0, retry=Retry(NoBackoff(), 0), **options
        )

    def _ensure_publisher(self) -> None:
        if self._publisher is None:
            with self._lock:
                if self._publisher is None:
                    self._publisher = threading.Thread(
                        target=self._publish_loop, name="solid-redis-pub", daemon=True
                    )
                    self._publisher.start()

    def _publish_loop(self) -> None:
        client: Any = None
        backoff, down_until, failing = 0.1, 0.0, False
        running = True
        while running:
            batch = [self._outbox.get()]
            while len(batch) < 512:
                try:
                    batch.append(self._outbox.get_nowait())
                except queue.Empty:
                    break
            running = None not in batch
            payloads = [p for p in dict.fromkeys(batch) if p is not None]
            if not payloads:
                continue
            if time.monotonic() < down_until:
                self.dropped += len(payloads)  # polling picks the work up
                continue
            try:
                if client is None:
                    client = self._client(socket_timeout=2.0)
                pipe = client.pipeline(transaction=False)
                channel = self._channel()
                for payload in payloads:
                    pipe.publish(channel, payload)
                pipe.execute()
            except Exception as exc:
                self.dropped += len(payloads)
                if not failing:
                    log.warning(
                        "cannot publish wake-ups to Redis (%s: %s); polling covers, retrying",
                        type(exc).__name__,
                        exc,
                    )
                failing = True
                down_until = time.monotonic() + backoff
                backoff = min(backoff * 2, _MAX_BACKOFF)
                _close(client)
                client = None
                continue
            self.published += len(payloads)
            if failing:
                log.info("publishing wake-ups to Redis again")
            backoff, failing = 0.1, False
        _close(client)

    def _subscribe(self) -> None:
        backoff, failing = 0.1, False
        while not self._stop.is_set():
            client: Any = None
            pubsub: Any = None
            try:
                # Pings an idle connection, so a vanished server is noticed.
                client = self._client(health_check_interval=10)
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(self._channel())
                if failing:
                    log.info("subscribed to Redis wake-ups again")
                backoff, failing = 0.1, False
                self.connections += 1
                self.listening.set()
                # Something may have been published while we were not subscribed.
                self._on_payload("w")
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=1.0)
                    if message is not None and message["type"] == "message":
                        data = message["data"]
                        payload = (
                            data.decode(errors="replace") if isinstance(data, bytes) else str(data)
                        )
                        self.received += 1
                        self.recent.append(payload)
                        self._on_payload(payload)
            except Exception as exc:
                if not failing:
                    log.warning(
                        "Redis wake-up subscription failed (%s: %s); polling only, retrying",
                        type(exc).__name__,
                        exc,
                    )
                failing = True
                self._stop.wait(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF)
            finally:
                self.listening.clear()
                _close(pubsub)
                _close(client)


def _close(resource: Any) -> None:
    """Close a Redis client or Pub/Sub object, ignoring errors (it may be broken)."""
    if resource is not None:
        try:
            resource.close()
        except Exception:
            pass
