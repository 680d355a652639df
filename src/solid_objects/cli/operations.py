"""Operator commands: pause, resume, pending, messages, reminders, processes, prune, doctor,
health.

Registered on the ``solid-objects`` group by :func:`register`; they share the
conventions of :mod:`solid_objects.cli.common`.
"""

from __future__ import annotations

import sys
from datetime import timedelta

import click

from .common import (
    EXIT_FAILED,
    EXIT_OK,
    PREVIEW_HINT,
    OperationFailed,
    admin_session,
    cursor_option,
    emit_json,
    execute_option,
    iso,
    json_option,
    limit_option,
    load_runtime,
    print_more,
    print_table,
    reason_option,
    short,
    target_argument,
    when,
)

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``12h``, ``30d``, ``2w`` (or plain seconds) as a timedelta."""
    value = text.strip().lower()
    unit = value[-1:] if value[-1:] in _DURATION_UNITS else "s"
    number = value[:-1] if value[-1:] in _DURATION_UNITS else value
    try:
        amount = float(number)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a duration like 30d, 12h or 90s") from None
    if amount < 0 or amount != amount or amount == float("inf"):
        raise click.BadParameter(f"{text!r} must be a finite, non-negative duration")
    return timedelta(seconds=amount * _DURATION_UNITS[unit])


# --- actors ---------------------------------------------------------------------------------


def _pause_command(pause: bool) -> click.Command:
    verb = "pause" if pause else "resume"

    @click.command(verb)
    @target_argument
    @click.argument("actor_type", metavar="TYPE")
    @click.argument("actor_id", metavar="ID")
    @reason_option
    @json_option
    def command(
        target: str, actor_type: str, actor_id: str, reason: str | None, as_json: bool
    ) -> None:
        with admin_session(target) as admin:
            change = admin.pause_actor if pause else admin.resume_actor
            result = change(actor_type, actor_id, reason=reason)
        if as_json:
            emit_json(result)
            return
        state = "paused" if pause else "running"
        click.echo(f"{actor_type} {actor_id}: {'already ' if result.already else ''}{state}")

    command.help = (
        'Hold an actor\'s mailbox: calls are accepted, none runs until "resume".'
        if pause
        else "Let a paused actor's mailbox run again, in order."
    )
    return command


@click.command()
@target_argument
@click.option("--type", "actor_type", default=None, help="Only this actor type.")
@limit_option
@cursor_option
@json_option
def pending(
    target: str, actor_type: str | None, limit: int, cursor: str | None, as_json: bool
) -> None:
    """Actors with messages in their mailbox (reconciliation)."""
    with admin_session(target) as admin:
        page = admin.actors_with_pending_work(actor_type=actor_type, limit=limit, cursor=cursor)
    if as_json:
        emit_json(page)
        return
    if not page.items:
        click.echo("no actor has pending work")
        return
    print_table(
        ["TYPE", "ID", "QUEUED", "ATTEMPT", "RETRY", "PAUSED", "LEASE"],
        [
            [
                a.actor_type,
                a.actor_id,
                a.queued,
                a.attempt,
                when(a.retry_at, page.now),
                "yes" if a.paused else "-",
                a.lease.owner if a.lease and not a.lease.expired else "-",
            ]
            for a in page.items
        ],
    )
    print_more(page.next_cursor, f"solid-objects pending {target}")


# --- reminders ------------------------------------------------------------------------------


@click.group()
def reminders() -> None:
    """List reminders; pause, resume, cancel or run one now."""


@reminders.command("list")
@target_argument
@click.option("--type", "actor_type", default=None, help="Only this actor type.")
@click.option("--id", "actor_id", default=None, help="Only this actor id.")
@limit_option
@cursor_option
@json_option
def reminders_list(
    target: str,
    actor_type: str | None,
    actor_id: str | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """Reminders, soonest first."""
    with admin_session(target) as admin:
        page = admin.list_reminders(
            actor_type=actor_type, actor_id=actor_id, limit=limit, cursor=cursor
        )
    if as_json:
        emit_json(page)
        return
    if not page.items:
        click.echo("no reminders")
        return
    print_table(
        ["DUE", "ACTOR", "OPERATION", "KEY", "EVERY", "PAUSED", "ARGUMENTS"],
        [
            [
                when(r.due_at, page.now),
                f"{r.actor_type} {r.actor_id}",
                r.operation,
                r.key or "-",
                f"{r.every_seconds:g}s" if r.every_seconds else "-",
                "yes" if r.paused else "-",
                short(r.arguments, 40),
            ]
            for r in page.items
        ],
    )
    print_more(page.next_cursor, f"solid-objects reminders list {target}")


def _reminder_command(change: str, help_text: str) -> click.Command:
    @click.command(change.replace("_", "-"), help=help_text)
    @target_argument
    @click.argument("actor_type", metavar="TYPE")
    @click.argument("actor_id", metavar="ID")
    @click.argument("operation", metavar="OPERATION")
    @click.option("--key", default="", help="The reminder's key (default: none).")
    @reason_option
    @json_option
    def command(
        target: str,
        actor_type: str,
        actor_id: str,
        operation: str,
        key: str,
        reason: str | None,
        as_json: bool,
    ) -> None:
        with admin_session(target) as admin:
            method = {
                "pause": admin.pause_reminder,
                "resume": admin.resume_reminder,
                "cancel": admin.cancel_reminder,
                "run_now": admin.run_reminder_now,
            }[change]
            result = method(actor_type, actor_id, operation, key, reason=reason)
        if as_json:
            emit_json(result)
            return
        done = {"pause": "paused", "resume": "resumed", "cancel": "cancelled", "run_now": "due now"}
        prefix = "already " if result.already else ""
        click.echo(f"{actor_type} {actor_id} {operation} {key!r}: {prefix}{done[change]}")

    return command


reminders.add_command(_reminder_command("pause", "Stop a reminder firing; it keeps its schedule."))
reminders.add_command(_reminder_command("resume", "Let a paused reminder fire again."))
reminders.add_command(_reminder_command("cancel", "Delete a reminder."))
reminders.add_command(_reminder_command("run_now", "Make a reminder due now."))


# --- processes ------------------------------------------------------------------------------


@click.group()
def processes() -> None:
    """Worker processes: live, stale (no heartbeat) and stopped; recover a dead one."""


@processes.command("list")
@target_argument
@click.option("--all", "include_stopped", is_flag=True, help="Include stopped processes.")
@limit_option
@cursor_option
@json_option
def processes_list(
    target: str, include_stopped: bool, limit: int, cursor: str | None, as_json: bool
) -> None:
    """Processes that run workers, with their heartbeat and the leases they hold."""
    with admin_session(target) as admin:
        page = admin.list_processes(include_stopped=include_stopped, limit=limit, cursor=cursor)
    if as_json:
        emit_json(page)
        return
    if not page.items:
        click.echo("no worker processes" + ("" if include_stopped else " running"))
        return
    print_table(
        ["PROCESS", "HOST", "PID", "STATE", "HEARTBEAT", "LEASES", "TYPES", "EFFECTS"],
        [
            [
                p.owner,
                p.host,
                p.pid,
                p.state
                if p.stop_reason is None or p.state == "draining"
                else f"{p.state} ({p.stop_reason})",
                when(p.heartbeat_at, page.now),
                p.leases,
                short(",".join(p.actor_types), 40),
                short(",".join(p.effect_names), 30),
            ]
            for p in page.items
        ],
    )
    print_more(page.next_cursor, f"solid-objects processes list {target}")


@processes.command("recover")
@target_argument
@click.argument("owner", metavar="PROCESS")
@reason_option
@json_option
def processes_recover(target: str, owner: str, reason: str | None, as_json: bool) -> None:
    """Declare a process dead: its leases and effect claims return to the pool now."""
    with admin_session(target) as admin:
        result = admin.recover_process(owner, reason=reason)
    if as_json:
        emit_json(result)
        return
    if result.already:
        click.echo(f"{owner}: already stopped")
    else:
        click.echo(
            f"{owner}: released {result.leases_released} leases and "
            f"{result.claims_released} effect claims"
        )


# --- messages -------------------------------------------------------------------------------


@click.group()
def messages() -> None:
    """Act on single messages."""


@messages.command("cancel")
@target_argument
@click.argument("message_id", metavar="ID")
@reason_option
@json_option
def messages_cancel(target: str, message_id: str, reason: str | None, as_json: bool) -> None:
    """Cancel a message that has not started (exit 1 if it finished or may be running)."""
    with admin_session(target) as admin:
        outcome = admin.try_cancel_message(message_id, reason=reason)
    if outcome.refused == "finished":
        raise OperationFailed(
            f"{message_id} was not cancelled: it already finished ({outcome.status})"
        )
    if outcome.refused is not None:
        raise OperationFailed(
            f"{message_id} was not cancelled: a worker holds its actor's lease and may be "
            "running it now (pause the actor, then cancel)"
        )
    if as_json:
        emit_json({"message_id": message_id, "cancelled": True})
    else:
        click.echo(f"{message_id}: cancelled")


# --- retention ------------------------------------------------------------------------------


@click.command()
@target_argument
@click.option(
    "--older-than",
    required=True,
    metavar="DURATION",
    help="Prune rows finished longer ago than this: 30d, 12h, 90s.",
)
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(["messages", "effects", "processes", "audit"]),
    help="What to prune (repeatable; default: messages, effects, processes).",
)
@execute_option
@click.option("--dry-run", is_flag=True, help="Only count (the default without --execute).")
@json_option
def prune(
    target: str,
    older_than: str,
    kinds: tuple[str, ...],
    execute: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Delete finished messages, done effects and stopped processes (never live work).

    Counts what it would delete unless given --execute.
    """
    if execute and dry_run:
        raise click.UsageError("--dry-run and --execute contradict each other")
    age = parse_duration(older_than)
    chosen = kinds or ("messages", "effects", "processes")

    def progress(kind: str, deleted: int) -> None:
        if not as_json:
            click.echo(f"  {kind}: {deleted} deleted...", err=True)

    with admin_session(target) as admin:
        report = admin.prune(age, kinds=chosen, dry_run=not execute, progress=progress)
    if as_json:
        emit_json(report)
        return
    verb = "deleted" if execute else "would delete"
    click.echo(f"finished before {iso(report.cutoff)}:")
    for kind, count in report.rows.items():
        click.echo(f"  {kind}: {verb} {count}")
    for actor_type, cutoff in report.cutoffs.items():
        click.echo(f"  (messages of {actor_type}: finished before {iso(cutoff)}, its retention)")
    if not execute:
        click.echo(PREVIEW_HINT)


@click.command()
@target_argument
@click.option("--type", "actor_type", default=None, help="Only this actor type.")
@execute_option
@json_option
def expire(target: str, actor_type: str | None, execute: bool, as_json: bool) -> None:
    """Delete idle actors of the types given a state_ttl, state and all.

    Only actors with no pending work, no live lease and no open dead letter, untouched
    for their type's state_ttl. Counts them unless given --execute.
    """

    def progress(kind: str, deleted: int) -> None:
        if not as_json:
            click.echo(f"  {kind}: {deleted} deleted...", err=True)

    with admin_session(target) as admin:
        report = admin.expire_actors(actor_type=actor_type, dry_run=not execute, progress=progress)
    if as_json:
        emit_json(report)
        return
    if not report.actors:
        click.echo(
            "no actor type has a state_ttl, so none expires: "
            'Runtime(state_ttl={"Type": seconds}) opts a type in'
        )
        return
    verb = "deleted" if execute else "would delete"
    for kind, count in report.actors.items():
        click.echo(f"{kind}: {verb} {count} (untouched since {iso(report.cutoffs[kind])})")
    if not execute:
        click.echo(PREVIEW_HINT)


# --- doctor and health ----------------------------------------------------------------------


@click.command()
@target_argument
@click.option("--no-round-trip", is_flag=True, help="Skip the call through a probe actor.")
@click.option("--timeout", type=float, default=10.0, show_default=True, help="Probe timeout (s).")
@json_option
def doctor(target: str, no_round_trip: bool, timeout: float, as_json: bool) -> None:
    """Check the configuration, database, workers and a real round trip; say what to fix.

    Exit 0 when nothing failed (warnings allowed), 1 when a check failed.
    """
    runtime = load_runtime(target)
    try:
        report = runtime.doctor(round_trip=not no_round_trip, timeout=timeout, app=target)
    finally:
        runtime.close()
    if as_json:
        emit_json({"status": report.status, "checks": report.checks})
    else:
        marks = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}
        for check in report.checks:
            click.echo(f"[{marks[check.status]}] {check.name}: {check.detail}")
            if check.advice:
                click.echo(f"       -> {check.advice}")
        click.echo(f"doctor: {report.status}")
    sys.exit(EXIT_OK if report.ok else EXIT_FAILED)


@click.command()
@target_argument
@json_option
def health(target: str, as_json: bool) -> None:
    """Readiness: the database answers and the schema is current (exit 0), or not (exit 1)."""
    runtime = load_runtime(target)
    try:
        report = runtime.health()
    finally:
        runtime.close()
    if as_json:
        emit_json({"status": report.status, "checks": report.checks})
    else:
        for check in report.checks:
            click.echo(f"{check.name}: {check.status}: {check.detail}")
    sys.exit(EXIT_OK if report.ok else EXIT_FAILED)


def register(main: click.Group) -> None:
    main.add_command(_pause_command(True))
    main.add_command(_pause_command(False))
    main.add_command(pending)
    main.add_command(messages)
    main.add_command(reminders)
    main.add_command(processes)
    main.add_command(prune)
    main.add_command(expire)
    main.add_command(doctor)
    main.add_command(health)
