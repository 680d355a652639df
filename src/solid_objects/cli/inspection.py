"""Reading and repairing through the administration API: ``status``, ``actors``,
``inspect``, ``dead-letters``, ``effects`` and ``audit``."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from typing import Any

import click

from ..admin import DeadLetter
from .common import (
    PREVIEW_HINT,
    OperationFailed,
    admin_session,
    cursor_option,
    emit_json,
    error_text,
    execute_option,
    iso,
    json_option,
    limit_option,
    print_fields,
    print_more,
    print_table,
    read_ids,
    reason_option,
    short,
    target_argument,
    when,
)


@click.command()
@target_argument
@json_option
def status(target: str, as_json: bool) -> None:
    """Counts per actor type: queued, retrying, dead letters, effects, reminders, leases."""
    with admin_session(target) as admin:
        result = admin.status()
    if as_json:
        emit_json(result)
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
    print_table(
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


@click.command()
@target_argument
@click.argument("actor_type", metavar="TYPE")
@click.option("--id-prefix", help="Only actors whose id starts with this text.")
@limit_option
@cursor_option
@json_option
def actors(
    target: str,
    actor_type: str,
    id_prefix: str | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """List the actors of TYPE, by id."""
    with admin_session(target) as admin:
        page = admin.list_actors(actor_type, id_prefix=id_prefix, limit=limit, cursor=cursor)
    if as_json:
        emit_json(page)
        return
    if not page.items:
        click.echo(
            f"no {actor_type} actors"
            + (f" with an id starting with {id_prefix!r}" if id_prefix else "")
            + (" after this cursor" if cursor else "")
        )
        return
    print_table(
        ["ID", "QUEUED", "ATTEMPT", "RETRY", "LEASE", "UPDATED"],
        [
            [
                a.actor_id,
                a.queued,
                a.attempt,
                when(a.retry_at, page.now) if a.retry_at else "-",
                "-"
                if a.lease is None
                else f"{a.lease.owner} ({'expired' if a.lease.expired else 'held'})",
                when(a.updated_at, page.now),
            ]
            for a in page.items
        ],
    )
    again = f"solid-objects actors {target} {actor_type}"
    if id_prefix:
        again += f" --id-prefix {shlex.quote(id_prefix)}"
    print_more(page.next_cursor, again)


@click.command()
@target_argument
@click.argument("actor_type", metavar="TYPE")
@click.argument("actor_id", metavar="ID")
@limit_option
@json_option
def inspect(target: str, actor_type: str, actor_id: str, limit: int, as_json: bool) -> None:
    """Show one actor: committed state, mailbox, lease, effects, reminders."""
    with admin_session(target) as admin:
        a = admin.inspect_actor(actor_type, actor_id, limit=limit)
    if as_json:
        emit_json(a)
        return
    now = a.now
    click.echo(
        f"{a.actor_type} {a.actor_id!r}  (incarnation {a.incarnation}, state version "
        f"{a.state_version}, updated {when(a.updated_at, now)})"
    )
    click.echo("state:")
    state = json.dumps(a.state, indent=2, ensure_ascii=False) if a.state is not None else "null"
    click.echo("\n".join("  " + line for line in state.splitlines()))
    if a.state is None:
        click.echo("  (nothing committed yet: the class defaults apply)")
    if a.lease is None:
        click.echo("lease: none (no worker holds this actor)")
    else:
        expiry = when(a.lease.expires_at, now)
        click.echo(
            f"lease: {'EXPIRED' if a.lease.expired else 'held'} by worker {a.lease.owner} "
            f"(generation {a.lease.generation}, {'expired ' if a.lease.expired else 'expires '}"
            f"{expiry})"
        )
    if a.paused:
        click.echo("paused: yes (the mailbox holds until resumed)")
    click.echo(f"mailbox: {a.queued_total} queued (done through seq {a.done_seq})")
    if a.queued:
        print_table(
            ["SEQ", "MESSAGE", "OPERATION", "ARGUMENTS", "PRIORITY", "STATUS", "ATTEMPTS",
             "LAST ERROR"],
            [
                [
                    m.seq,
                    m.id,
                    m.operation,
                    short(m.arguments, 40),
                    m.priority,
                    m.status if m.replaced_by is None else f"replaced by {m.replaced_by}",
                    m.attempts,
                    error_text(m.error) if m.error else "-",
                ]
                for m in a.queued
            ],
        )
        print_tracebacks((m.id, m.traceback) for m in a.queued)
        if a.retry_at is not None:
            click.echo(
                f"head: started {a.attempt} time(s), failing; next attempt {when(a.retry_at, now)}"
            )
        elif a.attempt:
            click.echo(f"head: started {a.attempt} time(s)")
    if a.scheduled:
        click.echo(f"scheduled (delayed, not in the mailbox yet): {len(a.scheduled)}")
        print_table(
            ["MESSAGE", "OPERATION", "ARGUMENTS", "DUE"],
            [
                [m.id, m.operation, short(m.arguments, 40), when(m.available_at, now)]
                for m in a.scheduled
            ],
        )
    if a.effects:
        click.echo(f"effects not done: {len(a.effects)}")
        print_table(
            ["EFFECT", "NAME", "STATUS", "ATTEMPTS", "LAST ERROR"],
            [
                [e.id, e.name, e.status, e.attempts, error_text(e.error) if e.error else "-"]
                for e in a.effects
            ],
        )
        print_tracebacks((e.id, e.traceback) for e in a.effects)
    if a.reminders:
        click.echo(f"reminders: {len(a.reminders)}")
        print_table(
            ["OPERATION", "KEY", "DUE", "EVERY"],
            [
                [
                    r.operation,
                    r.key or "-",
                    when(r.due_at, now),
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


@click.group("dead-letters")
def dead_letters() -> None:
    """Messages that failed for good: list, show, retry, discard."""


@dead_letters.command("list")
@target_argument
@click.option("--type", "actor_type", default=None, help="Only this actor type.")
@click.option("--id", "actor_id", default=None, help="Only this actor id.")
@click.option("--operation", default=None, help="Only this operation.")
@click.option(
    "--state",
    type=click.Choice(["open", "retried", "discarded", "all"]),
    default="open",
    show_default=True,
)
@limit_option
@cursor_option
@json_option
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
    with admin_session(target) as admin:
        page = admin.list_dead_letters(
            actor_type=actor_type,
            actor_id=actor_id,
            operation=operation,
            state=state,
            limit=limit,
            cursor=cursor,
        )
    if as_json:
        emit_json(page)
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
            when(d.died_at, page.now),
            f"{d.actor_type} {d.actor_id}",
            d.operation,
            d.attempts,
            short(error_text(d.error), 50),
        ]
        if state != "open":
            row.append(
                "-"
                if d.resolution is None
                else f"{d.resolution} by {d.resolved_by}"
                + (f" as {d.retry_message_id}" if d.retry_message_id else "")
            )
        rows.append(row)
    print_table(headers, rows)
    print_more(page.next_cursor, f"solid-objects dead-letters list {target}")


@dead_letters.command("show")
@target_argument
@click.argument("message_id", metavar="MESSAGE_ID")
@json_option
def dead_letters_show(target: str, message_id: str, as_json: bool) -> None:
    """Show one dead letter: arguments, error, resolution."""
    with admin_session(target) as admin:
        d = admin.get_dead_letter(message_id)
    if as_json:
        emit_json(d)
        return
    resolution = "open"
    if d.resolution is not None:
        resolution = f"{d.resolution} by {d.resolved_by} {iso(d.resolved_at)}"
        if d.retry_message_id:
            resolution += f" as {d.retry_message_id}"
        if d.reason:
            resolution += f" ({d.reason})"
    print_fields(
        [
            ("dead letter", d.id),
            ("actor", f"{d.actor_type} {d.actor_id!r} (seq {d.seq})"),
            ("operation", d.operation),
            ("arguments", json.dumps(d.arguments, ensure_ascii=False)),
            ("attempts", d.attempts),
            ("error", error_text(d.error)),
            ("sent", iso(d.created_at)),
            ("died", iso(d.died_at)),
            ("idempotency key", d.idempotency_key or "-"),
            ("resolution", resolution),
        ]
    )
    print_tracebacks([(d.id, d.traceback)])


@dead_letters.command("retry")
@target_argument
@click.argument("message_ids", nargs=-1, required=True, metavar="MESSAGE_ID... | -")
@reason_option
@json_option
def dead_letters_retry(
    target: str, message_ids: tuple[str, ...], reason: str | None, as_json: bool
) -> None:
    """Send dead letters again, each to the tail of its actor's mailbox.

    Idempotent: a dead letter is retried once however often this runs. If any id
    is unknown, not a dead letter, or discarded, nothing is retried. An id of "-"
    reads more ids from stdin.
    """
    ids = read_ids(message_ids)
    with admin_session(target) as admin:
        results = admin.retry_dead_letters(ids, reason=reason)
    if as_json:
        emit_json(results)
        return
    for r in results:
        if r.already:
            click.echo(f"{r.message_id}: already retried as {r.retry_message_id}")
        else:
            click.echo(f"{r.message_id}: retried as {r.retry_message_id}")


@dead_letters.command("discard")
@target_argument
@click.argument("message_ids", nargs=-1, required=True, metavar="MESSAGE_ID... | -")
@reason_option
@execute_option
@json_option
def dead_letters_discard(
    target: str, message_ids: tuple[str, ...], reason: str | None, execute: bool, as_json: bool
) -> None:
    """Mark dead letters discarded so they no longer list as open. Idempotent.

    Without --execute, only shows what would be discarded (and fails as the discard
    would: an unknown id, a letter already retried).
    """
    ids = read_ids(message_ids)
    with admin_session(target) as admin:
        if not execute:
            letters = [_discardable(admin.get_dead_letter(i)) for i in ids]
        else:
            results = admin.discard_dead_letters(ids, reason=reason)
    if not execute:
        if as_json:
            emit_json({"dry_run": True, "items": letters})
            return
        click.echo(f"would discard {sum(d.resolution is None for d in letters)} dead letter(s):")
        for d in letters:
            what = "already discarded" if d.resolution else f"{d.actor_type} {d.actor_id}"
            click.echo(f"  {d.id}  {what}  {d.operation}  {short(error_text(d.error), 50)}")
        click.echo(PREVIEW_HINT)
        return
    if as_json:
        emit_json(results)
        return
    for r in results:
        click.echo(f"{r.message_id}: {'already discarded' if r.already else 'discarded'}")


def _discardable(letter: DeadLetter) -> DeadLetter:
    """The letter, or the refusal the discard itself would give."""
    if letter.resolution == "retried":
        raise OperationFailed(
            f"dead letter {letter.id} was already retried as {letter.retry_message_id}; "
            "it cannot be discarded"
        )
    return letter


@click.group()
def effects() -> None:
    """Staged effects: list them, retry dead ones."""


@effects.command("list")
@target_argument
@click.option(
    "--status",
    type=click.Choice(["dead", "pending", "running", "done"]),
    default="dead",
    show_default=True,
)
@click.option("--type", "actor_type", default=None, help="Only effects of this actor type.")
@click.option("--name", default=None, help="Only effects with this name.")
@limit_option
@cursor_option
@json_option
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
    with admin_session(target) as admin:
        page = admin.list_effects(
            status=status, actor_type=actor_type, name=name, limit=limit, cursor=cursor
        )
    if as_json:
        emit_json(page)
        return
    if not page.items:
        click.echo(f"no {status} effects")
        return
    print_table(
        ["EFFECT", "NAME", "ACTOR", "ATTEMPTS", "ARGUMENTS", "LAST ERROR"],
        [
            [
                e.id,
                e.name,
                f"{e.actor_type} {e.actor_id}",
                e.attempts,
                short(e.arguments, 30),
                short(error_text(e.error), 50) if e.error else "-",
            ]
            for e in page.items
        ],
    )
    print_more(page.next_cursor, f"solid-objects effects list {target} --status {status}")


@effects.command("retry")
@target_argument
@click.argument("effect_ids", nargs=-1, required=True, metavar="EFFECT_ID... | -")
@reason_option
@json_option
def effects_retry(
    target: str, effect_ids: tuple[str, ...], reason: str | None, as_json: bool
) -> None:
    """Put dead effects back to pending (attempts reset); the handler runs with the same id."""
    ids = read_ids(effect_ids)
    with admin_session(target) as admin:
        results = admin.retry_effects(ids, reason=reason)
    if as_json:
        emit_json(results)
        return
    for r in results:
        state = f"already {r.status}" if r.already else "pending again"
        click.echo(f"{r.effect_id}: {state}")


@click.command()
@target_argument
@click.option("--target-id", default=None, help="Only records about this message or effect.")
@click.option("--principal", default=None, help="Only records of this principal.")
@limit_option
@cursor_option
@json_option
def audit(
    target: str,
    target_id: str | None,
    principal: str | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """The audit log: who changed what through the administration API, newest first."""
    with admin_session(target) as admin:
        page = admin.audit_log(target_id=target_id, principal=principal, limit=limit, cursor=cursor)
    if as_json:
        emit_json(page)
        return
    if not page.items:
        click.echo("no audit records")
        return
    print_table(
        ["WHEN", "PRINCIPAL", "ACTION", "TARGET", "ACTOR", "DETAIL"],
        [
            [
                iso(e.at),
                e.principal,
                e.action,
                e.target_id,
                f"{e.actor_type} {e.actor_id}" if e.actor_type else "-",
                short({k: v for k, v in (e.detail or {}).items() if v is not None}, 60),
            ]
            for e in page.items
        ],
    )
    print_more(page.next_cursor, f"solid-objects audit {target}")


def register(main: click.Group) -> None:
    for command in (status, actors, inspect, dead_letters, effects, audit):
        main.add_command(command)


def print_tracebacks(pairs: Iterable[tuple[str, str | None]]) -> None:
    """Each stored traceback in full, under the id it belongs to: where it failed."""
    for row_id, text in pairs:
        if text:
            click.echo(f"traceback of {row_id}:")
            click.echo("\n".join("  " + line for line in text.rstrip("\n").splitlines()))
