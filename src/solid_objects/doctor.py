"""The doctor and the health check: is this deployment able to run calls, and if not, why.

:func:`examine` (``solid-objects doctor``) checks, in order: the connection, the
schema, the database's settings, the clock, the worker processes, the wake-up
path, the backlog, and finally a real round trip through a throwaway actor
type that only the doctor's own runtime runs. Each :class:`Check` says what
was found and, when something is wrong, what to do about it.

:func:`health` (``runtime.health()``, the worker's ``--health-port``) is the
cheap version for probes: the database answers, the schema is current, and this
process's worker loop is alive and has heartbeated recently.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Literal

from .actor import Actor
from .admin.policy import Action, deny_all
from .authorization import (
    KINDS,
    TRUSTED_BY_DEFAULT,
    AuthorizationRequest,
    answer,
    option_name,
)
from .database import pool_limits
from .engine.presence import SERVE_ADVICE
from .engine.wakeup import PostgresListener, wakeup_path
from .redaction import redact_url
from .store.processes import DRAINING
from .store.schema import SCHEMA_VERSION, installed_version
from .store.sessions import direct_mismatch

if TYPE_CHECKING:
    from .runtime import Runtime

Status = Literal["ok", "warn", "fail"]

log = logging.getLogger("solid_objects.doctor")

#: How long the doctor waits for SQLite's write lock before reporting it held.
_LOCK_WAIT_S = 2.0

#: Clock differences smaller than this are not worth a word.
_CLOCK_TOLERANCE_S = 2.0


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    #: What to do about it (None when all is well).
    advice: str | None = None


@dataclass(frozen=True)
class Report:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no check failed (warnings are allowed)."""
        return all(c.status != "fail" for c in self.checks)

    @property
    def status(self) -> Status:
        statuses = {c.status for c in self.checks}
        return "fail" if "fail" in statuses else "warn" if "warn" in statuses else "ok"


class SolidObjectsDoctorProbe(Actor, auto_register=False):
    """The doctor's throwaway actor: only the doctor's own runtime registers and runs it."""

    pings: int = 0

    def ping(self, sent_at: float) -> float:
        self.pings += 1
        return sent_at


def examine(
    runtime: Runtime, *, round_trip: bool = True, timeout: float = 10.0, app: str = "APP"
) -> Report:
    """Run every check against ``runtime``'s database; never raises for what it finds.

    ``app`` is how the advice names the application (the CLI's ``module:runtime``).
    """
    checks: list[Check] = []
    connected = _connection(runtime, checks)
    if connected and _schema(runtime, checks):
        _settings(runtime, checks)
        _clock(runtime, checks)
        _workers(runtime, checks)
        _wakeup(runtime, checks)
        _connections(runtime, checks)
        _backlog(runtime, checks)
        _effect_limits(runtime, checks)
        if round_trip and _write_lock(runtime, checks, min(timeout, _LOCK_WAIT_S)):
            _round_trip(runtime, checks, timeout)
    _authorization(runtime, checks)
    return Report([_for_app(c, app) for c in checks])


#: The runtime the Django app builds from settings, which ``manage.py solid_objects``
#: supplies to every command (its management command's ``TARGET``).
DJANGO_APP = "solid_objects.contrib.django:runtime"

#: A command of the advice: ``solid-objects <command> {app}``.
_COMMAND = re.compile(r"solid-objects ((?:[a-z-]+ )*?)\{app\}")


def _for_app(check: Check, app: str) -> Check:
    """The advice's commands as the user runs them: ``manage.py solid_objects`` on Django."""
    if check.advice is None:
        return check
    if app == DJANGO_APP:
        advice = _COMMAND.sub(
            lambda m: "python manage.py solid_objects " + m.group(1).rstrip(), check.advice
        )
    else:
        advice = check.advice.replace("{app}", app)
    return dataclasses.replace(check, advice=advice)


def _connection(runtime: Runtime, checks: list[Check]) -> bool:
    url = redact_url(runtime.engine.url)
    try:
        with runtime.store.read() as tx:
            settings = runtime.store.dialect.settings(tx)
    except Exception as exc:
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        checks.append(
            Check(
                "connection",
                "fail",
                f"cannot reach {url}: {detail}",
                "check the URL, the credentials, and that the server is up and reachable",
            )
        )
        return False
    version = settings.get("version", "?")
    checks.append(Check("connection", "ok", f"{url} ({runtime.engine.dialect.name} {version})"))
    return True


def _schema(runtime: Runtime, checks: list[Check]) -> bool:
    with runtime.engine.connect() as conn:
        version = installed_version(conn, runtime.options.table_prefix)
    if version is None:
        checks.append(
            Check(
                "schema",
                "fail",
                "the Solid Objects tables are not installed",
                "run `solid-objects install {app}` (or call runtime.install())",
            )
        )
        return False
    if version < SCHEMA_VERSION:
        checks.append(
            Check(
                "schema",
                "fail",
                f"schema version {version}; this library needs {SCHEMA_VERSION}",
                "run `solid-objects install {app}` to upgrade (safe while workers run)",
            )
        )
        return False
    if version > SCHEMA_VERSION:
        checks.append(
            Check(
                "schema",
                "fail",
                f"schema version {version} is newer than this library ({SCHEMA_VERSION})",
                "upgrade the solid-objects package in this environment",
            )
        )
        return False
    checks.append(Check("schema", "ok", f"version {version}"))
    return True


def _settings(runtime: Runtime, checks: list[Check]) -> None:
    with runtime.store.read() as tx:
        settings = runtime.store.dialect.settings(tx)
    shown = ", ".join(f"{k}={v}" for k, v in settings.items())
    name = runtime.engine.dialect.name
    if name == "sqlite" and settings.get("journal_mode", "").lower() != "wal":
        checks.append(
            Check(
                "settings",
                "fail",
                shown,
                "the database must be in WAL mode; is it on a network filesystem?",
            )
        )
    elif name in ("mysql", "mariadb") and settings.get("transaction_isolation") != "READ-COMMITTED":
        checks.append(
            Check(
                "settings",
                "warn",
                shown,
                "the library's connections should run READ COMMITTED; does a proxy reset "
                "the session?",
            )
        )
    elif name == "sqlite" and settings.get("synchronous") == "1":
        checks.append(
            Check(
                "settings",
                "ok",
                shown + " (NORMAL: survives a process crash, not a power loss; "
                "sqlite_synchronous='FULL' for that)",
            )
        )
    else:
        checks.append(Check("settings", "ok", shown))


def _clock(runtime: Runtime, checks: list[Check]) -> None:
    before = time.time()
    with runtime.store.read() as tx:
        db_ms = runtime.store.now(tx)
    local = (before + time.time()) / 2
    skew = db_ms / 1000 - local
    detail = f"database clock {skew:+.3f}s from this host's"
    if abs(skew) > _CLOCK_TOLERANCE_S:
        checks.append(
            Check(
                "clock",
                "warn",
                detail,
                "leases, retries and reminders use the database clock, so they are "
                "unaffected; fix NTP on this host or the database server so logs agree",
            )
        )
    else:
        checks.append(Check("clock", "ok", detail))


def _workers(runtime: Runtime, checks: list[Check]) -> None:
    store = runtime.store
    with store.read() as tx:
        now = store.now(tx)
        rows = store.processes.list_processes(tx, include_stopped=False, after=None, limit=1000)
    draining = [r for r in rows if r.expires_at > now and r.stop_reason == DRAINING]
    live = [r for r in rows if r.expires_at > now and r.stop_reason != DRAINING]
    stale = [r for r in rows if r.expires_at <= now]
    served: set[str] = set()
    for r in live:
        try:
            served.update(json.loads(r.actor_types))
        except ValueError:
            pass
    missing = sorted(set(runtime.registry.types()) - served - {"SolidObjectsDoctorProbe"})
    hosts = sorted({r.host for r in live})
    detail = f"{len(live)} live worker processes on {len(hosts)} hosts"
    if draining:
        detail += f"; {len(draining)} draining (stopping): " + ", ".join(
            f"{r.owner}@{r.host}" for r in draining[:5]
        )
    if stale:
        detail += f"; {len(stale)} stale: " + ", ".join(f"{r.owner}@{r.host}" for r in stale[:5])
    if not live:
        checks.append(
            Check(
                "workers",
                "warn",
                detail,
                "no process runs workers, so calls wait in their mailboxes: start "
                "`solid-objects worker {app}` (see docs/deployment.md)",
            )
        )
    elif missing:
        checks.append(
            Check(
                "workers",
                "warn",
                detail + f"; no live process runs {', '.join(missing)}",
                "deploy workers that register those actor types",
            )
        )
    elif stale:
        checks.append(
            Check(
                "workers",
                "warn",
                detail,
                "live workers recover stale ones within one lease; or run "
                "`solid-objects processes recover {app} OWNER`",
            )
        )
    else:
        checks.append(Check("workers", "ok", detail))


def _wakeup(runtime: Runtime, checks: list[Check]) -> None:
    listener = runtime.kernel.listener
    poll = runtime.options.poll_interval
    path = wakeup_path(runtime.store, runtime.options.wakeup_url, runtime.direct_engine)
    if listener is None:
        pooled = runtime.store.dialect.pooled and runtime.store.dialect.notify_sql is not None
        checks.append(
            Check(
                "wake-up",
                "warn" if pooled else "ok",
                f"{path}; polling every {poll:g}s at most (callers in this process are "
                "woken directly)",
                "other processes' commits reach this one only by polling: set listen_url "
                "to a URL that reaches PostgreSQL directly, not through the pooler"
                if pooled
                else None,
            )
        )
        return
    kind = type(listener).__name__
    if runtime.direct_engine is not None and runtime.options.wakeup_url is None:
        problem = direct_mismatch(runtime.direct_engine, runtime.engine)
        if problem is not None:
            checks.append(
                Check(
                    "wake-up",
                    "fail",
                    f"{path}: {problem}",
                    "listen_url must reach the same database as the runtime's URL "
                    "(directly, not through the pooler)",
                )
            )
            return
    if isinstance(listener, PostgresListener) and listener.deaf:
        checks.append(
            Check(
                "wake-up",
                "warn",
                f"{kind}: LISTEN heard no probe NOTIFY from another connection, so "
                f"wake-ups are polled (every {poll:g}s at most)",
                "something between this process and PostgreSQL does not keep the "
                "listening session (PgBouncer in transaction mode?): set "
                "pooler='transaction' and listen_url to a URL that reaches PostgreSQL "
                "directly",
            )
        )
        return
    ping = getattr(listener, "ping", None)
    if ping is not None:
        try:
            ping()
        except Exception as exc:
            checks.append(
                Check(
                    "wake-up",
                    "warn",
                    f"{kind}: {redact_url(runtime.options.wakeup_url)} does not answer: {exc}",
                    f"nothing is lost, but cross-process calls wait for polling (up to "
                    f"{poll:g}s): check the Redis server and wakeup_url",
                )
            )
            return
    checks.append(
        Check("wake-up", "ok", f"{kind}: {path}, with polling every {poll:g}s as fallback")
    )


def _connections(runtime: Runtime, checks: list[Check]) -> None:
    """How many connections this process may open, and which (deployment.md section 3)."""
    backend = runtime.engine.url.get_backend_name()
    size, overflow = pool_limits(backend, runtime.options)
    pool = runtime.engine.pool
    in_use = getattr(pool, "checkedout", lambda: 0)()
    open_now = in_use + getattr(pool, "checkedin", lambda: 0)()
    outside = []
    where = " (listen_url)" if runtime.direct_engine is not None else ""
    if isinstance(runtime.kernel.listener, PostgresListener):
        outside.append(f"1 LISTEN{where}")
    if runtime.store.dialect.family in ("postgresql", "mysql") and (
        runtime.kernel.pool.presence.mark.engine is not None
    ):
        outside.append(f"1 session mark{where} while workers run")
    detail = (
        f"at most {size + overflow + len(outside)}: pool_size {size} + pool_overflow "
        f"{overflow}"
        + "".join(f" + {part}" for part in outside)
        + f"; now {open_now} open in the pool, {in_use} in use"
    )
    checks.append(Check("connections", "ok", detail))


def _backlog(runtime: Runtime, checks: list[Check]) -> None:
    store = runtime.store
    with store.read() as tx:
        _now, counts = store.admin.status_counts(tx)
        orphans = store.control.orphan_counts(tx)
        stranded = store.processes.unserved_type_counts(tx)
        unhandled = store.processes.unhandled_effect_counts(tx)
        incapable = store.processes.waiting_for_capability(tx)
        limited = store.limits.held_back(tx, runtime.registry.turn_limits())
    stranded.pop(SolidObjectsDoctorProbe.actor_type, None)  # a probe of a doctor that died
    dead = sum(c.dead_letters for c in counts)
    dead_effects = sum(c.effects_dead for c in counts)
    retrying = sum(c.retrying for c in counts)
    paused = sum(c.paused for c in counts)
    queued = sum(c.queued for c in counts)
    detail = (
        f"{queued} queued, {retrying} actors retrying, {paused} paused, {dead} open dead "
        f"letters, {dead_effects} dead effects"
    )
    advice = []
    if dead:
        advice.append("`solid-objects dead-letters list {app}`")
    if dead_effects:
        advice.append("`solid-objects effects list {app}`")
    if retrying:
        advice.append("`solid-objects status {app}` then `inspect` the retrying actors")
    if stranded:
        detail += "; no live process serves " + ", ".join(
            f"{actor_type} ({count} waiting)" for actor_type, count in stranded.items()
        )
        advice.append(SERVE_ADVICE)
    if incapable:
        detail += "; waiting for a process that runs " + ", ".join(
            f"{gap} ({count} waiting)" for gap, count in sorted(incapable.items())
        )
        timeout = runtime.options.incapable_timeout
        advice.append(
            "deploy the newer code to the workers (old ones leave such work for new ones); "
            + (
                "with none live, they wait forever (incapable_timeout=None)"
                if timeout is None
                else f"with none live for {timeout:g}s (incapable_timeout) each is a dead letter"
            )
        )
    if unhandled:
        detail += "; no live process handles effect " + ", ".join(
            f"{name} ({count} pending)" for name, count in unhandled.items()
        )
        timeout = runtime.options.unhandled_effect_timeout
        advice.append(
            "register the handler with @runtime.effect(NAME) in a process that runs "
            "workers, or fix the name given to emit(); "
            + (
                "they wait forever (unhandled_effect_timeout=None)"
                if timeout is None
                else f"after {timeout:g}s unhandled (unhandled_effect_timeout) each is dead "
                "and its on_failure callback runs"
            )
        )
    if limited:
        # Not a warning: a type at its limit is the limit doing its work.
        detail += "; turn limits (max_active_turns): " + ", ".join(
            f"{t} {active}/{runtime.registry.turn_limits()[t]} running, "
            f"{waiting} waiting for the limit"
            for t, (active, waiting) in limited.items()
        )
    if any(orphans):
        detail += f"; orphaned rows (messages, reminders, effects): {orphans}"
        advice.append("report the orphaned rows: they indicate a bug")
    checks.append(Check("backlog", "warn" if advice else "ok", detail, "; ".join(advice) or None))


def _effect_limits(runtime: Runtime, checks: list[Check]) -> None:
    """Effects held back by their flow control, and by which limit (only when some
    effect name has limits: waiting under a limit is the limit working, not a fault)."""
    with runtime.store.read() as tx:
        limits = runtime.store.effect_limits.effect_limit_status(tx)
    if not limits:
        return
    parts = []
    for s in limits:
        declared = []
        if s.rate_count is not None and s.rate_per_ms is not None:
            declared.append(f"rate {s.rate_count}/{s.rate_per_ms / 1000:g}s")
        if s.max_concurrent is not None:
            declared.append(f"at most {s.max_concurrent} at once")
        state = f"{s.running} running, {s.due} due"
        if s.waiting_on is not None:
            state += f", waiting on its {s.waiting_on} limit"
        parts.append(f"{s.name} ({', '.join(declared)}): {state}")
    checks.append(Check("effect limits", "ok", "; ".join(parts)))


def _write_lock(runtime: Runtime, checks: list[Check], wait: float) -> bool:
    """Whether a write transaction can start; a held SQLite write lock is reported.

    The round trip would otherwise wait for the lock in every write its runtime makes
    (start, call, destroy, stop), each up to ``busy_timeout``.
    """
    try:
        blocked = runtime.store.write_blocked(wait)
    except Exception as exc:  # the doctor reports, it does not raise
        blocked = f"{type(exc).__name__}: {exc}"
    if blocked is None:
        return True
    checks.append(
        Check(
            "write lock",
            "fail",
            f"no write transaction could start: {blocked}",
            "a connection (another process, or a stalled transaction) holds the database "
            "locked, so every call waits; find it with `fuser` or `lsof` on the database "
            "file and let it commit or end it",
        )
    )
    return False


def _round_trip(runtime: Runtime, checks: list[Check], timeout: float) -> None:
    """Call a probe actor through a runtime of the doctor's own, then destroy it.

    Every write of the probe's runtime waits for a lock at most ``timeout``
    (``busy_timeout``), so the round trip, its clean-up included, is bounded.
    """
    from .runtime import Runtime

    probe = Runtime(
        runtime.engine,  # its connections are made as the runtime's are (database.py)
        workers=1,
        actors=[SolidObjectsDoctorProbe],  # not the application's: only the probe runs here
        table_prefix=runtime.options.table_prefix,
        lease_duration=max(runtime.options.lease_duration, 1.0),
        call_timeout=timeout,
        busy_timeout=min(runtime.options.busy_timeout, timeout),
        # behind a transaction pooler as the runtime is: nothing prepared or SET there
        pooler=runtime.options.pooler,
        listen_url=runtime.options.listen_url,
    )
    try:
        actor_id = f"doctor-{probe.owner}"
        started = time.perf_counter()
        with probe:
            sent = time.time()
            ref = probe.ref(SolidObjectsDoctorProbe, actor_id)
            echoed = ref.ping(sent_at=sent)
            elapsed = time.perf_counter() - started
            ref.destroy()
        if echoed != sent:
            raise AssertionError(f"the probe answered {echoed!r}, not {sent!r}")
        checks.append(
            Check("round trip", "ok", f"a call was enqueued, run and committed in {elapsed:.3f}s")
        )
    except Exception as exc:  # whatever stopped the probe is the finding
        checks.append(
            Check(
                "round trip",
                "fail",
                f"{type(exc).__name__}: {exc}",
                "run with --log-level DEBUG to see where the call stopped",
            )
        )
    finally:
        try:
            probe.close()
        except Exception:
            log.warning("the doctor's probe runtime did not close cleanly", exc_info=True)


def _authorization(runtime: Runtime, checks: list[Check]) -> None:
    """Which policies are configured, and whether one lets in a caller who is nobody.

    Each configured policy is asked once about an anonymous caller (no context, an
    unknown principal) of the doctor's probe actor: allowing it means the surface is
    open to everyone who can reach it.
    """
    parts: list[str] = []
    open_to_all: list[str] = []
    for kind in KINDS:
        policy = getattr(runtime.options, option_name(kind))
        if policy is None:
            default = "trusted" if kind in TRUSTED_BY_DEFAULT else "denied"
            parts.append(f"{kind}: {default} (no policy)")
            continue
        anonymous = AuthorizationRequest(
            kind, None, SolidObjectsDoctorProbe.__name__, "doctor-anonymous", None
        )
        parts.append(f"{kind}: {_policy_name(policy)}")
        if _allows(kind, partial(answer, policy, anonymous)):
            open_to_all.append(option_name(kind))
    admin = runtime.admin.policy
    if admin is deny_all:
        parts.append("administration: denied (no policy)")
    else:
        parts.append(f"administration: {_policy_name(admin)}")
        stranger = "doctor:anonymous-probe"
        if any(
            _allows("administration", partial(admin, Action(stranger, name)))
            for name in ("status", "actors.destroy")
        ):
            open_to_all.append("runtime.admin.set_policy")
    detail = "; ".join(parts)
    if open_to_all:
        checks.append(
            Check(
                "authorization",
                "warn",
                f"{detail}; open to everyone: {', '.join(open_to_all)} allow(s) a caller "
                "with no authorization context (or an unknown principal)",
                "make each policy allow only callers it recognizes (see docs/security.md)",
            )
        )
    else:
        checks.append(Check("authorization", "ok", detail))


def _allows(kind: str, ask: Callable[[], object]) -> bool:
    try:
        return ask() is True
    except Exception as exc:
        log.debug("the %s policy raised %r for the doctor's anonymous probe", kind, exc)
        return False


def _policy_name(policy: object) -> str:
    target = getattr(policy, "policy", policy)  # an AsyncPolicy names its function
    name = getattr(target, "__qualname__", None)
    return f"policy {name}" if isinstance(name, str) else f"policy {target!r}"


# --- the health check ---------------------------------------------------------------------


def health(runtime: Runtime) -> Report:
    """Cheap checks for a liveness or readiness probe of a process running ``runtime``."""
    checks: list[Check] = []
    if not (_connection(runtime, checks) and _schema(runtime, checks)):
        return Report([_for_app(c, "APP") for c in checks])
    if runtime.kernel.running:
        alive, silent = runtime.kernel.worker_loop()
        limit = 2 * runtime.options.lease_duration
        if not alive:
            checks.append(Check("worker loop", "fail", "the poller thread is not running"))
        elif silent > limit:
            checks.append(
                Check(
                    "worker loop",
                    "fail",
                    f"no heartbeat committed for {silent:.1f}s (limit {limit:g}s)",
                    "the database may be refusing writes; see the process's log",
                )
            )
        else:
            checks.append(Check("worker loop", "ok", f"last heartbeat {silent:.1f}s ago"))
    return Report(checks)


def serve_health(runtime: Runtime, port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """Answer ``GET /healthz`` (and ``/readyz``) with the health report: 200 or 503, JSON.

    The endpoint has no authentication, so it listens on the loopback interface unless
    the caller names another ``host`` (a Kubernetes probe needs ``0.0.0.0``).

    For Kubernetes probes of a worker process (``solid-objects worker --health-port``);
    the server runs in a daemon thread until ``server.shutdown()``.
    """
    from .admin import to_jsonable

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] not in ("/healthz", "/readyz", "/"):
                self.send_error(404)
                return
            try:
                report = health(runtime)
                body = {"status": report.status, "checks": to_jsonable(report.checks)}
                code = 200 if report.ok else 503
            except Exception as exc:  # a probe must answer, whatever went wrong
                body, code = {"status": "fail", "error": repr(exc)}, 503
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("health %s", format % args)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="solid-health", daemon=True).start()
    return server
