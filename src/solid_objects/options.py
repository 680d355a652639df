"""Runtime options, validated once with clear errors."""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from .authorization import KINDS, Policy, check_policies, option_name
from .codec import check_identifier
from .errors import ConfigurationError, InvalidArguments
from .redaction import redact_url

#: More threads or connections than this per runtime is a mistake, not a setting.
_MAX_THREADS = 1024


@dataclass(frozen=True)
class Options:
    """Every tunable of a :class:`~solid_objects.Runtime`; pass them as keyword arguments."""

    #: Seconds an activation lease lasts without renewal; a stalled worker loses it after this.
    lease_duration: float = 30.0
    #: Seconds between a worker process's checks for peers the database proves gone
    #: (their session ended: killed, crashed, cut off). Their leases and effect claims
    #: are taken over then, not at lease expiry (None: only the heartbeat tells).
    takeover_interval: float | None = 1.0
    #: In-process worker threads; 0 makes a caller-only process that relies on other workers.
    workers: int = 4
    #: Default seconds a call waits for its committed result.
    call_timeout: float = 30.0
    #: Longest sleep of an idle poll for work from other processes (seconds).
    poll_interval: float = 0.5
    #: Attempts (including crashes mid-turn) before a message becomes a dead letter.
    max_attempts: int = 5
    #: First retry delay in seconds; doubles per attempt up to ``retry_max_delay``.
    retry_base_delay: float = 0.5
    retry_max_delay: float = 30.0
    #: Turns one activation runs before other actors get a worker (fairness).
    max_turns_per_activation: int = 64
    #: Seconds one activation may keep its worker in one pass before other actors get a
    #: turn (checked after each committed turn; None: only ``max_turns_per_activation``).
    max_activation_seconds: float | None = 1.0
    #: Seconds an idle activation keeps its lease and cached state before releasing them.
    idle_timeout: float = 10.0
    #: Threads running effect handlers in this process.
    effect_workers: int = 4
    #: Longest silence of a running effect attempt: its process renews the claim every
    #: third of this while the handler runs; unrenewed this long (the process died or
    #: stalled), another runner takes the effect over. ``max_duration`` bounds a run.
    effect_timeout: float = 60.0
    #: Attempts of an effect handler before the effect is dead (and ``on_failure`` runs).
    effect_max_attempts: int = 10
    #: Seconds an effect may wait with no live process handling its name (a typo in
    #: ``emit``, a handler never deployed) before it is dead and ``on_failure`` runs
    #: (None: it waits forever).
    unhandled_effect_timeout: float | None = 3600.0
    #: Seconds a message may wait when no live process's code can run it (an operation
    #: this code does not have, or an actor state newer than its ``state_version``: a
    #: rolling deploy's old workers leave such work for the new ones) before it is a
    #: dead letter naming what was missing (None: it waits forever). While some live
    #: process can run it, it waits for that process, however long.
    incapable_timeout: float | None = 3600.0
    #: Queued plus running messages one actor may hold before an enqueue raises
    #: ``MailboxFull`` (None: unbounded). Delayed sends and ``send_to`` are not refused.
    max_mailbox_length: int | None = 10_000
    max_payload_bytes: int = 1 << 20
    max_result_bytes: int = 1 << 20
    max_state_bytes: int = 5 << 20
    #: SQLite only: ``NORMAL`` survives process crashes; ``FULL`` also power loss.
    sqlite_synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    #: Seconds a statement waits for a lock held by another connection.
    busy_timeout: float = 30.0
    #: Connections the runtime's pool keeps open (None: ``workers + effect_workers + 8``).
    #: Raise it to the number of application threads that call at once: above it, each
    #: transaction opens and closes a connection of its own (costly, TLS especially).
    pool_size: int | None = None
    #: Connections the pool may open beyond ``pool_size`` in a burst, each closed after its
    #: transaction (None: 32 on the servers, 64 on SQLite). With ``pool_size`` it bounds
    #: a process's connections: ``pool_size + pool_overflow``, plus on PostgreSQL one
    #: LISTEN connection and, in a process running workers, one session mark
    #: (``solid-objects doctor`` reports them). A transaction that finds the pool full
    #: waits for a connection to come back.
    pool_overflow: int | None = None
    #: Prefix of the library's table names.
    table_prefix: str = "solid_"
    #: Redis URL for cross-process wake-ups (``redis://127.0.0.1:6379/0``), published after
    #: each commit; for MySQL/MariaDB, which have no NOTIFY. ``peer://`` instead: no
    #: broker, each process sends its peers signed UDP datagrams (``peer://`` binds
    #: 127.0.0.1 on a free port; ``peer://0.0.0.0:7400?advertise=10.0.0.5`` for several
    #: hosts). None: NOTIFY on PostgreSQL, polling elsewhere. Every process of one
    #: deployment should use the same path.
    wakeup_url: str | None = None
    #: PostgreSQL only: what sits between the runtime and the server. ``"transaction"``
    #: for PgBouncer (or another pooler) in ``pool_mode = transaction``: the runtime then
    #: prepares no statement on the server, sets nothing for the session (isolation and
    #: lock wait are set per transaction) and holds no session lock through it; LISTEN
    #: and the session mark need ``listen_url``, else wake-ups are polled and takeover
    #: waits for the heartbeat. ``"session"`` (``pool_mode = session``) or None (a direct
    #: connection) change nothing.
    pooler: Literal["transaction", "session"] | None = None
    #: PostgreSQL only: a URL reaching the same database *directly* (not through a
    #: transaction pooler), for the two connections that need a session of their own:
    #: the LISTEN connection of wake-ups and the worker's session mark. None: both use
    #: the runtime's database URL (with ``pooler="transaction"``: no LISTEN, no mark).
    listen_url: str | None = None
    #: A replica of the database (a PostgreSQL streaming replica, or a MariaDB replica
    #: following the primary by GTID) for reads that tolerate staleness
    #: (``@query`` and ``snapshot()`` asked with ``stale_ok=True``, dashboard listings);
    #: never read for anything that decides a turn.
    replica_url: str | None = None
    #: Seconds a replica read may be behind the primary; past it reads go to the primary.
    replica_max_lag: float = 5.0
    #: With ``replica_url``: the administration API's listings and the dashboard's list
    #: pages read the replica while it is within ``replica_max_lag``. False: they read
    #: the primary, as every action and single-item inspection always does.
    replica_for_admin: bool = True
    #: Seconds after which finished messages, done effects and stopped processes are
    #: pruned automatically by processes running workers (None: never; prune by hand).
    #: It is also how long an idempotency key deduplicates a retried call.
    retention: float | None = None
    #: Seconds between automatic prunes (with ``retention`` or ``retention_by_type``).
    retention_interval: float = 3600.0
    #: Per actor type, seconds its finished messages are kept instead of ``retention``,
    #: e.g. ``{"Invoice": 365 * 86400}``: a prune never deletes them sooner, and the
    #: automatic one deletes them after that long (even with ``retention=None``).
    retention_by_type: Mapping[str, float] | None = None
    #: Opt-in expiry of idle actors, per actor type: seconds an actor may stay untouched
    #: (no message enqueued or run) before ``admin.expire_actors()`` deletes it, state
    #: and all, e.g. ``{"Session": 30 * 86400}``. Types not named never expire.
    state_ttl: Mapping[str, float] | None = None
    #: Lets ``runtime.testing.reset()`` empty every table of the library. Only for a
    #: runtime on a database made for tests (the pytest plugin's fixtures set it).
    allow_reset: bool = False
    #: The actor classes this runtime serves, e.g. ``actors=[Counter, Cart]`` (plus any
    #: registered later). None: every ``Actor`` subclass defined in the process.
    actors: tuple[type[Any], ...] | None = None
    #: Per-call policies (``policy(AuthorizationRequest) -> bool``; see
    #: :mod:`solid_objects.authorization`). None: the application's own calls are
    #: trusted (message, query, destroy); subscriptions are denied.
    authorize_message: Policy | None = None
    authorize_query: Policy | None = None
    authorize_destroy: Policy | None = None
    authorize_subscription: Policy | None = None

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> Options:
        """The options given to ``Runtime(...)``, validated; an unknown name is a
        ``ConfigurationError`` that lists the known ones.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigurationError(
                f"unknown runtime option(s) {unknown}; valid options: {sorted(known)}"
            )
        actors = kwargs.get("actors")
        if actors is not None:
            if isinstance(actors, str | bytes | type) or not hasattr(actors, "__iter__"):
                raise ConfigurationError(
                    f"actors must be a list of Actor classes, e.g. actors=[Counter], not {actors!r}"
                )
            kwargs = {**kwargs, "actors": tuple(actors)}
        for name in ("retention_by_type", "state_ttl"):
            table = kwargs.get(name)
            if table is not None:
                if not isinstance(table, Mapping):
                    raise ConfigurationError(
                        f'{name} maps actor types to seconds, e.g. {{"Session": 86400}}, '
                        f"not {table!r}"
                    )
                kwargs = {**kwargs, name: MappingProxyType(dict(table))}
        options = cls(**kwargs)
        options.validate()
        return options

    def validate(self) -> None:
        """Refuse out-of-range or inconsistent values with a ``ConfigurationError``.

        One step per kind of rule: durations, per-type seconds, counts, policies and
        flags, names.
        """
        self._check_durations()
        self._check_seconds_by_type()
        self._check_counts()
        self._check_policies_and_flags()
        self._check_names()

    def _positive(self, name: str, *, integer: bool = False, zero: bool = False) -> None:
        """``name`` is a finite number (an int if ``integer``), > 0 (>= 0 with ``zero``)."""
        value = getattr(self, name)
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            kind = "an int" if integer else "a number"
            raise ConfigurationError(f"{name} must be {kind}, not {value!r}")
        if not math.isfinite(value):  # NaN passes every comparison; inf overflows ms
            raise ConfigurationError(f"{name} must be a finite number, not {value!r}")
        if value < 0 or (value == 0 and not zero):
            raise ConfigurationError(f"{name} must be {'>= 0' if zero else '> 0'}, not {value}")

    def _check_durations(self) -> None:
        for name in (
            "lease_duration",
            "call_timeout",
            "poll_interval",
            "retry_base_delay",
            "retry_max_delay",
            "idle_timeout",
            "busy_timeout",
            "effect_timeout",
            "retention_interval",
        ):
            self._positive(name)
        for name in (
            "retention",
            "max_activation_seconds",
            "unhandled_effect_timeout",
            "takeover_interval",
        ):
            if getattr(self, name) is not None:  # None: no bound
                self._positive(name)
        if self.incapable_timeout is not None:  # 0: dead at once when nobody can run it
            self._positive("incapable_timeout", zero=True)
        if self.lease_duration < 0.05:
            raise ConfigurationError("lease_duration must be at least 0.05 seconds")

    def _check_seconds_by_type(self) -> None:
        for name in ("retention_by_type", "state_ttl"):
            for actor_type, seconds in (getattr(self, name) or {}).items():
                try:
                    check_identifier(actor_type, what=f"{name}: actor type")
                except InvalidArguments as exc:
                    raise ConfigurationError(str(exc)) from None
                if (
                    isinstance(seconds, bool)
                    or not isinstance(seconds, int | float)
                    or not math.isfinite(seconds)
                    or seconds <= 0
                ):
                    raise ConfigurationError(
                        f"{name}[{actor_type!r}] must be a positive number of seconds, "
                        f"not {seconds!r}"
                    )

    def _check_counts(self) -> None:
        for name in ("pool_size", "max_mailbox_length"):
            if getattr(self, name) is not None:  # None: the default pool, no bound
                self._positive(name, integer=True)
        if self.pool_overflow is not None:
            self._positive("pool_overflow", integer=True, zero=True)
        self._positive("workers", integer=True, zero=True)
        for name in (
            "max_attempts",
            "max_turns_per_activation",
            "max_payload_bytes",
            "max_result_bytes",
            "max_state_bytes",
            "effect_workers",
            "effect_max_attempts",
        ):
            self._positive(name, integer=True)
        for name in ("workers", "effect_workers", "pool_size", "pool_overflow"):
            count = getattr(self, name)
            if count is not None and count > _MAX_THREADS:
                raise ConfigurationError(f"{name} must be at most {_MAX_THREADS}, not {count}")

    def _check_policies_and_flags(self) -> None:
        check_policies(
            {option_name(kind): getattr(self, option_name(kind)) for kind in KINDS},
            allow_async=True,
        )
        for flag in ("allow_reset", "replica_for_admin"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigurationError(
                    f"{flag} must be True or False, not {getattr(self, flag)!r}"
                )
        if self.sqlite_synchronous not in ("NORMAL", "FULL"):
            raise ConfigurationError("sqlite_synchronous must be 'NORMAL' or 'FULL'")

    def _check_names(self) -> None:
        if self.pooler not in (None, "transaction", "session"):
            raise ConfigurationError(
                f"pooler must be 'transaction', 'session' or None, not {self.pooler!r}"
            )
        if self.listen_url is not None and not re.match(
            r"(postgresql|postgres)(\+psycopg)?://", str(self.listen_url)
        ):
            raise ConfigurationError(
                "listen_url must be a postgresql+psycopg:// URL reaching the database "
                f"directly, not {redact_url(str(self.listen_url))!r}"
            )
        if self.replica_url is not None and not re.match(
            r"((postgresql|postgres)(\+psycopg)?|(mysql|mariadb)(\+pymysql)?)://",
            str(self.replica_url),
        ):
            raise ConfigurationError(
                "replica_url must be a postgresql+psycopg:// URL of a streaming replica or "
                f"a mysql+pymysql:// URL of a MariaDB replica, not "
                f"{redact_url(str(self.replica_url))!r}"
            )
        lag = self.replica_max_lag
        if isinstance(lag, bool) or not isinstance(lag, int | float) or not lag > 0:
            raise ConfigurationError(
                "replica_max_lag must be a positive number of seconds, "
                f"not {self.replica_max_lag!r}"
            )
        if self.wakeup_url is not None and not re.match(
            r"(redis|rediss|unix|peer)://", str(self.wakeup_url)
        ):
            raise ConfigurationError(
                "wakeup_url must be a redis://, rediss://, unix:// or peer:// URL, not "
                f"{redact_url(str(self.wakeup_url))!r}"
            )
        if self.wakeup_url is not None and str(self.wakeup_url).startswith("peer:"):
            parse_peer_url(str(self.wakeup_url))
        for actor in self.actors or ():
            if not isinstance(actor, type):
                raise ConfigurationError(f"actors must be Actor classes, not {actor!r}")
        if not isinstance(self.table_prefix, str) or not re.fullmatch(
            r"[a-z][a-z0-9_]{0,30}", self.table_prefix
        ):
            raise ConfigurationError("table_prefix must match [a-z][a-z0-9_]{0,30}")

    def replace(self, **changes: Any) -> Options:
        """A copy with some options changed, validated again."""
        return dataclasses.replace(self, **changes)

    @property
    def lease_ms(self) -> int:
        return int(self.lease_duration * 1000)

    def retry_delay(self, attempt: int) -> float:
        """The backoff before attempt ``attempt + 1``: exponential with jitter, capped at
        ``retry_max_delay``.
        """
        return float(min(self.retry_base_delay * 2 ** max(attempt - 1, 0), self.retry_max_delay))


def parse_peer_url(url: str) -> tuple[str, int, str | None]:
    """``(bind host, bind port, advertised host or None)`` of a ``peer://`` URL.

    ``peer://`` binds 127.0.0.1 on a free port (one host); ``peer://0.0.0.0:7400?
    advertise=10.0.0.5`` listens everywhere and tells peers to send to 10.0.0.5.
    """
    parts = urlsplit(url)
    if parts.scheme != "peer":
        raise ConfigurationError(f"not a peer:// URL: {url!r}")
    try:
        port = parts.port or 0
    except ValueError:
        raise ConfigurationError(f"wakeup_url {url!r}: the port is not a number") from None
    host = parts.hostname or "127.0.0.1"
    query = parse_qs(parts.query)
    unknown = set(query) - {"advertise"}
    if unknown:
        raise ConfigurationError(f"wakeup_url {url!r}: unknown parameter {sorted(unknown)[0]}")
    advertise = query.get("advertise", [None])[-1]
    if advertise is None and _wildcard(host):
        raise ConfigurationError(
            f"wakeup_url {url!r} listens on every interface: add ?advertise=HOST, the "
            "address other processes reach this one at"
        )
    return host, port, advertise


def _wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False
