"""The doctor's checks of the processes that run the work: live workers, the wake-up
path, the backlog and what holds it back, effect limits, and a real round trip
through a throwaway actor type only the doctor's own runtime runs."""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING

from ..actor import Actor
from ..engine.presence import SERVE_ADVICE
from ..engine.wakeup import PostgresListener, wakeup_path
from ..redaction import redact_url
from ..store.processes import DRAINING
from ..store.sessions import direct_mismatch
from .report import Check

if TYPE_CHECKING:
    from ..runtime import Runtime

log = logging.getLogger("solid_objects.doctor")


class SolidObjectsDoctorProbe(Actor, auto_register=False):
    """The doctor's throwaway actor: only the doctor's own runtime registers and runs it."""

    pings: int = 0

    def ping(self, sent_at: float) -> float:
        self.pings += 1
        return sent_at


def check_workers(runtime: Runtime, checks: list[Check]) -> None:
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


def check_wakeup(runtime: Runtime, checks: list[Check]) -> None:
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


def check_backlog(runtime: Runtime, checks: list[Check]) -> None:
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


def check_effect_limits(runtime: Runtime, checks: list[Check]) -> None:
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


def check_round_trip(runtime: Runtime, checks: list[Check], timeout: float) -> None:
    """Call a probe actor through a runtime of the doctor's own, then destroy it.

    Every write of the probe's runtime waits for a lock at most ``timeout``
    (``busy_timeout``), so the round trip, its clean-up included, is bounded.
    """
    from ..runtime import Runtime

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
