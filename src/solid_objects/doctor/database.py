"""The doctor's checks of the database itself: reachable, the schema current, its
settings, its clock, the connections this process may hold, and SQLite's write lock."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..database import pool_limits
from ..engine.wakeup import PostgresListener
from ..redaction import redact_url
from ..store.schema import SCHEMA_VERSION, installed_version
from .report import Check

if TYPE_CHECKING:
    from ..runtime import Runtime

#: How long the doctor waits for SQLite's write lock before reporting it held.
LOCK_WAIT_S = 2.0


#: Clock differences smaller than this are not worth a word.
_CLOCK_TOLERANCE_S = 2.0


def check_connection(runtime: Runtime, checks: list[Check]) -> bool:
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


def check_schema(runtime: Runtime, checks: list[Check]) -> bool:
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


def check_settings(runtime: Runtime, checks: list[Check]) -> None:
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


def check_clock(runtime: Runtime, checks: list[Check]) -> None:
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


def check_connections(runtime: Runtime, checks: list[Check]) -> None:
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


def check_write_lock(runtime: Runtime, checks: list[Check], wait: float) -> bool:
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
