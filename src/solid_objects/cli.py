"""The ``solid-objects`` command line.

Commands that need the application's actors take its runtime as
``module:attribute`` (like uvicorn), e.g. ``solid-objects worker myapp.actors:runtime``.
Exit codes: 0 success, 1 a check or operation failed, 2 bad usage or a
target that cannot be loaded.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from .errors import SolidObjectsError
from .runtime import AsyncRuntime, Runtime

if TYPE_CHECKING:
    from .admin import Administration


def load_runtime(target: str) -> Runtime:
    """Import ``module:attribute`` and return the Runtime it names.

    Every way this can fail is a usage error (exit 2) that names the target:
    a malformed target, a module that cannot be imported or raises while
    importing (a bad database URL in ``Runtime(...)``, say), a missing
    attribute, or an attribute that is not a runtime.
    """
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise click.UsageError(
            f"expected MODULE:ATTRIBUTE (e.g. myapp.actors:runtime), got {target!r}"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.UsageError(f"cannot import module {module_name!r}: {exc}") from None
    except Exception as exc:
        raise click.UsageError(
            f"importing module {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    try:
        value: Any = module
        for part in attribute.split("."):
            value = getattr(value, part)
        if callable(value) and not isinstance(value, Runtime | AsyncRuntime):
            value = value()
    except AttributeError:
        raise click.UsageError(f"module {module_name!r} has no attribute {attribute!r}") from None
    except Exception as exc:
        raise click.UsageError(f"loading {target} failed: {type(exc).__name__}: {exc}") from None
    if isinstance(value, AsyncRuntime):
        value = value.sync
    if not isinstance(value, Runtime):
        raise click.UsageError(f"{target} is a {type(value).__name__}, not a solid_objects.Runtime")
    return value


@click.group()
@click.option(
    "--log-level",
    default="WARNING",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def main(log_level: str) -> None:
    """Durable virtual actors in the SQL database you already run."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


@main.command()
def quickstart() -> None:
    """Run a self-verifying demo on a temporary SQLite database."""
    from . import quickstart as demo

    try:
        demo.run(click.echo)
    except AssertionError as exc:
        click.echo(f"FAILED: {exc}", err=True)
        sys.exit(1)


@main.command()
@click.argument("target")
@click.option("--workers", type=int, default=None, help="Worker threads (default: the runtime's).")
@click.option("--install/--no-install", default=False, help="Install or upgrade the schema first.")
@click.option(
    "--health-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve GET /healthz on this port (200 healthy, 503 not) for Kubernetes probes.",
)
def worker(target: str, workers: int | None, install: bool, health_port: int | None) -> None:
    """Run workers for TARGET (module:runtime) until SIGTERM or SIGINT.

    On the first signal the worker finishes in-flight turns, releases its
    leases so other workers take over at once, and exits 0.
    """
    runtime = load_runtime(target)
    if workers is not None:
        if workers < 1:
            raise click.BadParameter("must be at least 1", param_hint="--workers")
        runtime = _with_workers(runtime, workers)
    elif runtime.options.workers < 1:
        raise click.UsageError(f"{target} has workers=0; pass --workers N")
    try:
        if install:
            runtime.install()
        click.echo(
            f"solid-objects worker {runtime.owner}: {runtime.options.workers} threads, "
            f"types {runtime.registry.types()}",
            err=True,
        )
        if health_port is not None:
            from .doctor import serve_health

            serve_health(runtime, health_port, host="0.0.0.0")
            click.echo(f"health check on http://0.0.0.0:{health_port}/healthz", err=True)
        runtime.run()
    except SolidObjectsError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    finally:
        runtime.close()


def _with_workers(runtime: Runtime, workers: int) -> Runtime:
    """A runtime like ``runtime`` (same database, same actors) with ``workers`` threads."""
    options = {f: getattr(runtime.options, f) for f in runtime.options.__dataclass_fields__}
    options["workers"] = workers
    fresh = Runtime(runtime.engine.url, **options)
    for actor_type in runtime.registry.types():
        fresh.register(runtime.registry.get(actor_type).cls)
    for name in runtime.effects.names():
        fresh.effect(name)(runtime.effects.get(name))
    for name in runtime.commit_actions.names():
        fresh.commit_action(name)(runtime.commit_actions.get(name))
    fresh.admin.set_policy(runtime.admin.policy)
    runtime.close()
    return fresh


@main.command()
@click.argument("target")
@click.option(
    "--sql",
    "show_sql",
    is_flag=True,
    help="Print the DDL of a fresh install for this database instead of running it.",
)
def install(target: str, show_sql: bool) -> None:
    """Create or upgrade the Solid Objects tables for TARGET (module:runtime)."""
    runtime = load_runtime(target)
    try:
        if show_sql:
            click.echo(runtime.store.install_sql())
            return
        runtime.install()
        click.echo("installed")
    except SolidObjectsError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    finally:
        runtime.close()


# --- operations: the administration API for people and scripts --------------------------
#
# Each command loads the application's runtime (TARGET, as for `worker`), acts
# as the principal ``cli:<OS user>`` through the application's administration
# policy, prints a table (or JSON with --json), and exits 0 on success, 1 when
# the operation failed (not found, refused, not authorized, database error) and
# 2 for bad usage or a target that cannot be loaded. Errors go to stderr.


def cli_principal() -> str:
    """``cli:<user>``: the account running the command (from the OS, not the environment)."""
    try:
        import pwd

        user = pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError, AttributeError):
        import getpass

        try:
            user = getpass.getuser()
        except Exception:
            user = "unknown"
    return f"cli:{user}"


class _Failed(click.ClickException):
    """An operation failed: message on stderr, exit 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


@contextmanager
def _admin(target: str) -> Iterator[Administration]:
    """The runtime's administration API acting as the CLI principal; errors become exits."""
    from sqlalchemy.exc import SQLAlchemyError

    from .errors import (
        DatabaseError,
        InvalidArguments,
        MessageNotFound,
        NotFound,
        OperationRefused,
        SchemaNotInstalled,
        SchemaTooNew,
        Unauthorized,
    )

    runtime = load_runtime(target)
    principal = cli_principal()
    try:
        yield runtime.admin.as_principal(principal)
    except Unauthorized as exc:
        raise _Failed(
            f"not authorized: {exc}\n"
            f"The command line acts as {principal}; the application grants access in the "
            f"module of {target}, e.g. runtime.admin.set_policy(allow({{'cli:*': 'read', "
            f"{principal!r}: '*'}})) (see docs/operations.md)."
        ) from None
    except InvalidArguments as exc:
        raise click.UsageError(str(exc)) from None
    except UnicodeError as exc:  # argv bytes that are not UTF-8 reached a filter unchecked
        raise click.UsageError(f"an argument is not valid UTF-8 text: {exc}") from None
    except (NotFound, MessageNotFound, OperationRefused, SchemaNotInstalled, SchemaTooNew) as exc:
        raise _Failed(str(exc)) from None
    except (DatabaseError, SQLAlchemyError) as exc:
        from .redaction import redact_url

        url = redact_url(runtime.engine.url)
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise _Failed(f"database {url}: {detail}") from None
    except SolidObjectsError as exc:
        raise _Failed(f"{type(exc).__name__}: {exc}") from None
    finally:
        # The runtime never started workers here: dispose of it without the lease
        # release that Runtime.close() writes.
        runtime.store.close()
        runtime.engine.dispose()


def _emit_json(value: Any) -> None:
    from .admin import to_jsonable

    click.echo(json.dumps(to_jsonable(value), indent=2, ensure_ascii=False))


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def _fields(pairs: Sequence[tuple[str, Any]]) -> None:
    width = max(len(k) for k, _ in pairs)
    for key, value in pairs:
        click.echo(f"{key.ljust(width)}  {value}")


def _iso(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.isoformat(timespec="seconds").replace("+00:00", "Z")


def _when(value: datetime | None, now: datetime | None) -> str:
    """A time relative to the database clock: ``in 4.2s``, ``3m ago``."""
    if value is None:
        return "-"
    if now is None:
        return _iso(value)
    seconds = (value - now).total_seconds()
    span = abs(seconds)
    if span < 60:
        text = f"{span:.1f}s"
    elif span < 3600:
        text = f"{span / 60:.0f}m"
    elif span < 86400:
        text = f"{span / 3600:.1f}h"
    else:
        text = f"{span / 86400:.1f}d"
    return f"in {text}" if seconds > 0 else f"{text} ago"


def _short(value: Any, width: int = 60) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        kind = error.get("type", "Error")
        if kind == "Rejected":
            return f"Rejected {error.get('code')}: {error.get('message', '')}"
        return f"{kind}: {error.get('message', '')}"
    return _short(error)


def _more(next_cursor: str | None, command: str) -> None:
    if next_cursor is not None:
        click.echo(f"(more: {command} --cursor {next_cursor})")


def _ids(values: tuple[str, ...]) -> list[str]:
    """IDs from the command line; ``-`` reads more from stdin (whitespace-separated)."""
    ids: list[str] = []
    for value in values:
        if value == "-":
            ids.extend(sys.stdin.read().split())
        else:
            ids.append(value)
    if not ids:
        raise click.UsageError("no ids given")
    return ids


_target = click.argument("target", metavar="MODULE:RUNTIME")
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
_limit = click.option(
    "--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="Page size."
)
_cursor = click.option("--cursor", default=None, help="Continue a listing where it stopped.")
_reason = click.option("--reason", default=None, help="Why (kept in the audit record).")


@main.command()
@_target
@_json_option
def status(target: str, as_json: bool) -> None:
    """Counts per actor type: queued, retrying, dead letters, effects, reminders, leases."""
    with _admin(target) as admin:
        result = admin.status()
    if as_json:
        _emit_json(result)
        return
    if not result.types:
        click.echo("no actors yet")
        return
    rows = [
        [
            t.actor_type,
            t.actors,
            t.queued,
            t.scheduled,
            t.retrying,
            t.dead_letters,
            f"{t.effects_pending}/{t.effects_running}/{t.effects_dead}",
            t.reminders,
            f"{t.leases_held}/{t.leases_expired}",
            t.paused,
        ]
        for t in [*result.types, result.total]
    ]
    rows[-1][0] = "(total)"
    _table(
        [
            "TYPE",
            "ACTORS",
            "QUEUED",
            "SCHEDULED",
            "RETRYING",
            "DEAD LETTERS",
            "EFFECTS pend/run/dead",
            "REMINDERS",
            "LEASES held/expired",
            "PAUSED",
        ],
        rows,
    )
    total = result.total
    hints = []
    if total.dead_letters:
        hints.append(
            f"{total.dead_letters} open dead letter(s): solid-objects dead-letters list {target}"
        )
    for t in result.types:
        if t.retrying:
            hints.append(
                f"{t.retrying} {t.actor_type} actor(s) retrying a failing message, their "
                f"mailboxes held: solid-objects actors {target} {t.actor_type}"
            )
    if total.effects_dead:
        hints.append(f"{total.effects_dead} dead effect(s): solid-objects effects list {target}")
    if total.leases_expired:
        hints.append(
            f"{total.leases_expired} expired lease(s): their worker stopped renewing them "
            "(crashed or stopped); another worker takes the actor over when it has work"
        )
    if hints:
        click.echo("")
        for hint in hints:
            click.echo(hint)


@main.command()
@_target
@click.argument("actor_type", metavar="TYPE")
@_limit
@_cursor
@_json_option
def actors(target: str, actor_type: str, limit: int, cursor: str | None, as_json: bool) -> None:
    """List the actors of TYPE, by id."""
    with _admin(target) as admin:
        page = admin.list_actors(actor_type, limit=limit, cursor=cursor)
    if as_json:
        _emit_json(page)
        return
    if not page.items:
        click.echo(f"no {actor_type} actors" + (" after this cursor" if cursor else ""))
        return
    _table(
        ["ID", "QUEUED", "ATTEMPT", "RETRY", "LEASE", "UPDATED"],
        [
            [
                a.actor_id,
                a.queued,
                a.attempt,
                _when(a.retry_at, page.now) if a.retry_at else "-",
                "-"
                if a.lease is None
                else f"{a.lease.owner} ({'expired' if a.lease.expired else 'held'})",
                _when(a.updated_at, page.now),
            ]
            for a in page.items
        ],
    )
    _more(page.next_cursor, f"solid-objects actors {target} {actor_type}")


@main.command()
@_target
@click.argument("actor_type", metavar="TYPE")
@click.argument("actor_id", metavar="ID")
@_limit
@_json_option
def inspect(target: str, actor_type: str, actor_id: str, limit: int, as_json: bool) -> None:
    """Show one actor: committed state, mailbox, lease, effects, reminders."""
    with _admin(target) as admin:
        a = admin.inspect_actor(actor_type, actor_id, limit=limit)
    if as_json:
        _emit_json(a)
        return
    now = a.now
    click.echo(
        f"{a.actor_type} {a.actor_id!r}  (incarnation {a.incarnation}, state version "
        f"{a.state_version}, updated {_when(a.updated_at, now)})"
    )
    click.echo("state:")
    state = json.dumps(a.state, indent=2, ensure_ascii=False) if a.state is not None else "null"
    click.echo("\n".join("  " + line for line in state.splitlines()))
    if a.state is None:
        click.echo("  (nothing committed yet: the class defaults apply)")
    if a.lease is None:
        click.echo("lease: none (no worker holds this actor)")
    else:
        expiry = _when(a.lease.expires_at, now)
        click.echo(
            f"lease: {'EXPIRED' if a.lease.expired else 'held'} by worker {a.lease.owner} "
            f"(generation {a.lease.generation}, {'expired ' if a.lease.expired else 'expires '}"
            f"{expiry})"
        )
    if a.paused:
        click.echo("paused: yes (the mailbox holds until resumed)")
    click.echo(f"mailbox: {a.queued_total} queued (done through seq {a.done_seq})")
    if a.queued:
        _table(
            ["SEQ", "MESSAGE", "OPERATION", "ARGUMENTS", "ATTEMPTS", "LAST ERROR"],
            [
                [
                    m.seq,
                    m.id,
                    m.operation,
                    _short(m.arguments, 40),
                    m.attempts,
                    _error_text(m.error) if m.error else "-",
                ]
                for m in a.queued
            ],
        )
        if a.retry_at is not None:
            click.echo(
                f"head: started {a.attempt} time(s), failing; next attempt {_when(a.retry_at, now)}"
            )
        elif a.attempt:
            click.echo(f"head: started {a.attempt} time(s)")
    if a.scheduled:
        click.echo(f"scheduled (delayed, not in the mailbox yet): {len(a.scheduled)}")
        _table(
            ["MESSAGE", "OPERATION", "ARGUMENTS", "DUE"],
            [
                [m.id, m.operation, _short(m.arguments, 40), _when(m.available_at, now)]
                for m in a.scheduled
            ],
        )
    if a.effects:
        click.echo(f"effects not done: {len(a.effects)}")
        _table(
            ["EFFECT", "NAME", "STATUS", "ATTEMPTS", "LAST ERROR"],
            [
                [e.id, e.name, e.status, e.attempts, _error_text(e.error) if e.error else "-"]
                for e in a.effects
            ],
        )
    if a.reminders:
        click.echo(f"reminders: {len(a.reminders)}")
        _table(
            ["OPERATION", "KEY", "DUE", "EVERY"],
            [
                [
                    r.operation,
                    r.key or "-",
                    _when(r.due_at, now),
                    "-" if r.every_seconds is None else f"{r.every_seconds:g}s",
                ]
                for r in a.reminders
            ],
        )
    if a.open_dead_letters:
        click.echo(
            f"dead letters: {a.open_dead_letters} open: solid-objects dead-letters list {target} "
            f"--type {a.actor_type} --id {a.actor_id}"
        )


@main.group("dead-letters")
def dead_letters() -> None:
    """Messages that failed for good: list, show, retry, discard."""


@dead_letters.command("list")
@_target
@click.option("--type", "actor_type", default=None, help="Only this actor type.")
@click.option("--id", "actor_id", default=None, help="Only this actor id.")
@click.option("--operation", default=None, help="Only this operation.")
@click.option(
    "--state",
    type=click.Choice(["open", "retried", "discarded", "all"]),
    default="open",
    show_default=True,
)
@_limit
@_cursor
@_json_option
def dead_letters_list(
    target: str,
    actor_type: str | None,
    actor_id: str | None,
    operation: str | None,
    state: str,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """List dead letters, the most recent first."""
    with _admin(target) as admin:
        page = admin.list_dead_letters(
            actor_type=actor_type,
            actor_id=actor_id,
            operation=operation,
            state=state,
            limit=limit,
            cursor=cursor,
        )
    if as_json:
        _emit_json(page)
        return
    if not page.items:
        click.echo(f"no {state} dead letters" if state != "all" else "no dead letters")
        return
    headers = ["MESSAGE", "DIED", "ACTOR", "OPERATION", "ATTEMPTS", "ERROR"]
    if state != "open":
        headers.append("RESOLUTION")
    rows = []
    for d in page.items:
        row: list[Any] = [
            d.id,
            _when(d.died_at, page.now),
            f"{d.actor_type} {d.actor_id}",
            d.operation,
            d.attempts,
            _short(_error_text(d.error), 50),
        ]
        if state != "open":
            row.append(
                "-"
                if d.resolution is None
                else f"{d.resolution} by {d.resolved_by}"
                + (f" as {d.retry_message_id}" if d.retry_message_id else "")
            )
        rows.append(row)
    _table(headers, rows)
    _more(page.next_cursor, f"solid-objects dead-letters list {target}")


@dead_letters.command("show")
@_target
@click.argument("message_id", metavar="MESSAGE_ID")
@_json_option
def dead_letters_show(target: str, message_id: str, as_json: bool) -> None:
    """Show one dead letter: arguments, error, resolution."""
    with _admin(target) as admin:
        d = admin.get_dead_letter(message_id)
    if as_json:
        _emit_json(d)
        return
    resolution = "open"
    if d.resolution is not None:
        resolution = f"{d.resolution} by {d.resolved_by} {_iso(d.resolved_at)}"
        if d.retry_message_id:
            resolution += f" as {d.retry_message_id}"
        if d.reason:
            resolution += f" ({d.reason})"
    _fields(
        [
            ("dead letter", d.id),
            ("actor", f"{d.actor_type} {d.actor_id!r} (seq {d.seq})"),
            ("operation", d.operation),
            ("arguments", json.dumps(d.arguments, ensure_ascii=False)),
            ("attempts", d.attempts),
            ("error", _error_text(d.error)),
            ("sent", _iso(d.created_at)),
            ("died", _iso(d.died_at)),
            ("idempotency key", d.idempotency_key or "-"),
            ("resolution", resolution),
        ]
    )


@dead_letters.command("retry")
@_target
@click.argument("message_ids", nargs=-1, required=True, metavar="MESSAGE_ID... | -")
@_reason
@_json_option
def dead_letters_retry(
    target: str, message_ids: tuple[str, ...], reason: str | None, as_json: bool
) -> None:
    """Send dead letters again, each to the tail of its actor's mailbox.

    Idempotent: a dead letter is retried once however often this runs. If any id
    is unknown, not a dead letter, or discarded, nothing is retried. ``-`` reads
    ids from stdin.
    """
    ids = _ids(message_ids)
    with _admin(target) as admin:
        results = admin.retry_dead_letters(ids, reason=reason)
    if as_json:
        _emit_json(results)
        return
    for r in results:
        if r.already:
            click.echo(f"{r.message_id}: already retried as {r.retry_message_id}")
        else:
            click.echo(f"{r.message_id}: retried as {r.retry_message_id}")


@dead_letters.command("discard")
@_target
@click.argument("message_ids", nargs=-1, required=True, metavar="MESSAGE_ID... | -")
@_reason
@_json_option
def dead_letters_discard(
    target: str, message_ids: tuple[str, ...], reason: str | None, as_json: bool
) -> None:
    """Mark dead letters discarded so they no longer list as open. Idempotent."""
    ids = _ids(message_ids)
    with _admin(target) as admin:
        results = admin.discard_dead_letters(ids, reason=reason)
    if as_json:
        _emit_json(results)
        return
    for r in results:
        click.echo(f"{r.message_id}: {'already discarded' if r.already else 'discarded'}")


@main.group()
def effects() -> None:
    """Staged effects: list them, retry dead ones."""


@effects.command("list")
@_target
@click.option(
    "--status",
    type=click.Choice(["dead", "pending", "running", "done"]),
    default="dead",
    show_default=True,
)
@click.option("--type", "actor_type", default=None, help="Only effects of this actor type.")
@click.option("--name", default=None, help="Only effects with this name.")
@_limit
@_cursor
@_json_option
def effects_list(
    target: str,
    status: str,
    actor_type: str | None,
    name: str | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """List effects of one status (dead by default), newest first."""
    with _admin(target) as admin:
        page = admin.list_effects(
            status=status, actor_type=actor_type, name=name, limit=limit, cursor=cursor
        )
    if as_json:
        _emit_json(page)
        return
    if not page.items:
        click.echo(f"no {status} effects")
        return
    _table(
        ["EFFECT", "NAME", "ACTOR", "ATTEMPTS", "ARGUMENTS", "LAST ERROR"],
        [
            [
                e.id,
                e.name,
                f"{e.actor_type} {e.actor_id}",
                e.attempts,
                _short(e.arguments, 30),
                _short(_error_text(e.error), 50) if e.error else "-",
            ]
            for e in page.items
        ],
    )
    _more(page.next_cursor, f"solid-objects effects list {target} --status {status}")


@effects.command("retry")
@_target
@click.argument("effect_ids", nargs=-1, required=True, metavar="EFFECT_ID... | -")
@_reason
@_json_option
def effects_retry(
    target: str, effect_ids: tuple[str, ...], reason: str | None, as_json: bool
) -> None:
    """Put dead effects back to pending (attempts reset); the handler runs with the same id."""
    ids = _ids(effect_ids)
    with _admin(target) as admin:
        results = admin.retry_effects(ids, reason=reason)
    if as_json:
        _emit_json(results)
        return
    for r in results:
        state = f"already {r.status}" if r.already else "pending again"
        click.echo(f"{r.effect_id}: {state}")


@main.command()
@_target
@click.option("--target-id", default=None, help="Only records about this message or effect.")
@click.option("--principal", default=None, help="Only records of this principal.")
@_limit
@_cursor
@_json_option
def audit(
    target: str,
    target_id: str | None,
    principal: str | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """The audit log: who changed what through the administration API, newest first."""
    with _admin(target) as admin:
        page = admin.audit_log(target_id=target_id, principal=principal, limit=limit, cursor=cursor)
    if as_json:
        _emit_json(page)
        return
    if not page.items:
        click.echo("no audit records")
        return
    _table(
        ["WHEN", "PRINCIPAL", "ACTION", "TARGET", "ACTOR", "DETAIL"],
        [
            [
                _iso(e.at),
                e.principal,
                e.action,
                e.target_id,
                f"{e.actor_type} {e.actor_id}" if e.actor_type else "-",
                _short({k: v for k, v in (e.detail or {}).items() if v is not None}, 60),
            ]
            for e in page.items
        ],
    )
    _more(page.next_cursor, f"solid-objects audit {target}")


def _register_operations() -> None:
    from .cli_operations import register

    register(main)


_register_operations()

if __name__ == "__main__":
    main()
