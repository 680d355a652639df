"""What every ``solid-objects`` command shares: loading the target, output, exit codes.

Commands that need the application's actors take its runtime as
``MODULE:RUNTIME`` (like uvicorn), e.g. ``solid-objects worker myapp.actors:runtime``,
or from ``solid-objects -A MODULE:RUNTIME`` / ``SOLID_OBJECTS_APP`` (like Celery).
The operator commands act as the principal ``cli:<OS user>`` through the
application's administration policy, print a table (or JSON with ``--json``) and
put errors on stderr.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from ..errors import SolidObjectsError
from ..runtime import AsyncRuntime, Runtime

if TYPE_CHECKING:
    from ..admin import Administration

#: Exit codes of every command: success; a check or an operation failed (not found,
#: refused, not authorized, database error, schema not installed); bad usage or a
#: target that cannot be loaded (click's own code for usage errors).
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def load_runtime(target: str) -> Runtime:
    """Import ``MODULE:RUNTIME`` and return the Runtime it names.

    Every way this can fail is a usage error (exit 2) that names the target and
    says what to change: a malformed target, a module that is not on the import
    path (the message names the working directory and ``PYTHONPATH``), a module
    that raises while importing (a bad database URL in ``Runtime(...)``, say), a
    missing attribute, or an attribute that is not a runtime (an actor class,
    say: the message lists the module's runtimes).
    """
    module_name, sep, attribute = target.partition(":")
    if not sep or not module_name or not attribute:
        raise click.UsageError(
            f"expected MODULE:RUNTIME (e.g. myapp.actors:runtime), got {target!r}"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.UsageError(_import_failure(module_name, exc)) from None
    except Exception as exc:
        raise click.UsageError(
            f"importing module {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    try:
        value: Any = module
        for part in attribute.split("."):
            value = getattr(value, part)
        if isinstance(value, type):
            raise click.UsageError(
                f"{target} is the class {value.__qualname__}, not a Runtime. "
                + _runtime_hint(module, module_name)
            )
        if callable(value) and not isinstance(value, Runtime | AsyncRuntime):
            value = value()  # a factory function returning the runtime
    except AttributeError:
        raise click.UsageError(
            f"module {module_name!r} has no attribute {attribute!r}. "
            + _runtime_hint(module, module_name)
        ) from None
    except click.UsageError:
        raise
    except Exception as exc:
        raise click.UsageError(f"loading {target} failed: {type(exc).__name__}: {exc}") from None
    if isinstance(value, AsyncRuntime):
        value = value.sync
    if not isinstance(value, Runtime):
        raise click.UsageError(
            f"{target} is a {type(value).__name__}, not a Runtime. "
            + _runtime_hint(module, module_name)
        )
    return value


def _import_failure(module_name: str, exc: ImportError) -> str:
    """Why ``module_name`` did not import, with where Python looked when it is not found."""
    missing = getattr(exc, "name", None)
    if isinstance(exc, ModuleNotFoundError) and missing is not None:
        if module_name == missing or module_name.startswith(missing + "."):
            path = os.environ.get("PYTHONPATH")
            return (
                f"cannot import module {module_name!r}: {exc}. Modules are looked up from "
                f"the working directory ({os.getcwd()}) and PYTHONPATH "
                f"({path if path else 'not set'}): run the command from your project's "
                f"folder, or set PYTHONPATH to the folder that holds "
                f"{missing.replace('.', '/')}/ or {missing.replace('.', '/')}.py"
            )
        return (
            f"importing module {module_name!r} failed: it imports {missing!r}, which is "
            f"not installed in this environment ({sys.executable}): {exc}"
        )
    return f"cannot import module {module_name!r}: {exc}"


def _runtime_hint(module: Any, module_name: str) -> str:
    """What a target should name: the module's runtimes, if it has any."""
    found = sorted(
        name
        for name, value in vars(module).items()
        if isinstance(value, Runtime | AsyncRuntime) and not name.startswith("_")
    )
    if found:
        listed = ", ".join(f"{module_name}:{name}" for name in found)
        return f"The target names the attribute that holds the runtime: {listed}"
    return (
        "The target names the module attribute that holds your solid_objects.Runtime "
        f"(or AsyncRuntime, or a function returning one), e.g. {module_name}:runtime "
        "for runtime = Runtime(...)"
    )


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


class OperationFailed(click.ClickException):
    """An operation failed: message on stderr, exit 1."""

    exit_code = EXIT_FAILED

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


@contextmanager
def admin_session(target: str) -> Iterator[Administration]:
    """The runtime's administration API acting as the CLI principal; errors become exits."""
    from sqlalchemy.exc import SQLAlchemyError

    from ..errors import (
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
        raise OperationFailed(
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
        raise OperationFailed(str(exc)) from None
    except (DatabaseError, SQLAlchemyError) as exc:
        from ..redaction import redact_url

        url = redact_url(runtime.engine.url)
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise OperationFailed(f"database {url}: {detail}") from None
    except SolidObjectsError as exc:
        raise OperationFailed(f"{type(exc).__name__}: {exc}") from None
    finally:
        # The runtime never started workers here: dispose of it without the lease
        # release that Runtime.close() writes.
        runtime.store.close()
        runtime.engine.dispose()


def emit_json(value: Any) -> None:
    from ..admin import to_jsonable

    click.echo(json.dumps(to_jsonable(value), indent=2, ensure_ascii=False))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def print_fields(pairs: Sequence[tuple[str, Any]]) -> None:
    width = max(len(k) for k, _ in pairs)
    for key, value in pairs:
        click.echo(f"{key.ljust(width)}  {value}")


def iso(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.isoformat(timespec="seconds").replace("+00:00", "Z")


def when(value: datetime | None, now: datetime | None) -> str:
    """A time relative to the database clock: ``in 4.2s``, ``3m ago``."""
    if value is None:
        return "-"
    if now is None:
        return iso(value)
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


def short(value: Any, width: int = 60) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def error_text(error: Any) -> str:
    if isinstance(error, dict):
        kind = error.get("type", "Error")
        if kind == "Rejected":
            return f"Rejected {error.get('code')}: {error.get('message', '')}"
        return f"{kind}: {error.get('message', '')}"
    return short(error)


def print_more(next_cursor: str | None, command: str) -> None:
    if next_cursor is not None:
        click.echo(f"(more: {command} --cursor {next_cursor})")


def read_ids(values: tuple[str, ...]) -> list[str]:
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


target_argument = click.argument("target", metavar="[MODULE:RUNTIME]")

#: The environment variable that names the runtime when a command line does not.
APP_ENVVAR = "SOLID_OBJECTS_APP"

#: ``solid-objects -A MODULE:RUNTIME COMMAND``: the runtime for every command, as
#: Celery's ``-A``/``CELERY_APP`` and procrastinate's ``--app``/``PROCRASTINATE_APP``.
#: Its parameter is named ``target`` like the commands' argument, so the Django
#: management command, which supplies the project's runtime to every parameter of
#: that name, drops it as well.
app_option = click.option(
    "-A",
    "--app",
    "target",
    metavar="MODULE:RUNTIME",
    envvar=APP_ENVVAR,
    show_envvar=True,
    default=None,
    help="The runtime of the commands that take one, so they need no MODULE:RUNTIME argument.",
)


def _looks_like_target(value: str | None) -> bool:
    """``MODULE:RUNTIME`` has a colon; no type, id, message id or process name has one."""
    if value is None or value.startswith("-"):
        return False
    module, sep, attribute = value.partition(":")
    return bool(sep and module and attribute) and not any(c.isspace() for c in value)


def with_app(command: click.Command, ctx: click.Context, args: list[str]) -> list[str]:
    """``args`` with the ``-A``/``SOLID_OBJECTS_APP`` runtime in front when they lack one.

    The command's own parser reads ``args`` once to find what would be its first
    positional argument: a ``MODULE:RUNTIME`` there is the target, as before;
    otherwise the runtime named by ``-A`` or the environment is put in front.
    """
    if ctx.resilient_parsing or not any(p.name == "target" for p in command.params):
        return args
    try:
        options, _, _ = command.make_parser(ctx).parse_args(args=list(args))
    except click.NoSuchOption as exc:
        if exc.option_name in ("-A", "--app"):
            raise click.UsageError(
                f"-A/--app goes before the command: solid-objects -A MODULE:RUNTIME "
                f"{ctx.info_name} ... (or name the runtime as the command's first argument)",
                ctx,
            ) from None
        return args  # the real parse reports it
    except click.UsageError:
        return args
    found = options.get("target")  # click marks a missing one with a sentinel
    given = found if isinstance(found, str) else None
    help_option = command.get_help_option(ctx)
    asked_help = help_option is not None and options.get(help_option.name or "") is True
    if _looks_like_target(given) or asked_help:
        return args
    app = ctx.find_root().params.get("target")
    if isinstance(app, str) and app:
        return [app, *args]
    how = (
        "name it as the command's first argument, with solid-objects -A MODULE:RUNTIME "
        f"before the command, or in the {APP_ENVVAR} environment variable"
    )
    if given is None:
        raise click.UsageError(
            f"missing MODULE:RUNTIME, the runtime to act on (e.g. myapp.actors:runtime): {how}",
            ctx,
        )
    raise click.UsageError(
        f"expected MODULE:RUNTIME (e.g. myapp.actors:runtime), got {given!r}: {how}", ctx
    )


class AppCommand(click.Command):
    """A command whose ``MODULE:RUNTIME`` may come from ``-A`` or ``SOLID_OBJECTS_APP``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, with_app(self, ctx, args))


class AppGroup(click.Group):
    """The ``solid-objects`` group: every command added that takes ``MODULE:RUNTIME``
    (in subgroups too) also takes it from ``-A``/``SOLID_OBJECTS_APP``."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        _accept_app(cmd)
        super().add_command(cmd, name)


def _accept_app(command: click.Command) -> None:
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _accept_app(sub)
    elif type(command) is click.Command and any(p.name == "target" for p in command.params):
        # The command modules build plain click commands; this gives them the lookup.
        command.__class__ = AppCommand


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
limit_option = click.option(
    "--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="Page size."
)
cursor_option = click.option("--cursor", default=None, help="Continue a listing where it stopped.")
reason_option = click.option("--reason", default=None, help="Why (kept in the audit record).")
#: Destructive commands only preview what they would do, unless given this.
execute_option = click.option(
    "--execute", is_flag=True, help="Do it; without this flag only show what would be done."
)
PREVIEW_HINT = "(a preview: nothing was changed; run again with --execute to do it)"
