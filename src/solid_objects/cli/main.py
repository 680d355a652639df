"""The ``solid-objects`` group: global options, ``quickstart``, and every command module.

The commands live by concern in :mod:`.worker` (worker, install),
:mod:`.inspection` (status, actors, inspect, dead-letters, effects, audit),
:mod:`.operations` (pause, resume, pending, reminders, processes, prune, doctor,
health) and :mod:`.dashboard` (dashboard); each registers itself here, and all
share :mod:`.common`.
"""

from __future__ import annotations

import logging
import sys

import click

from .. import __version__
from . import dashboard, inspection, operations, worker
from .common import EXIT_FAILED, AppGroup, app_option


@click.group(cls=AppGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="solid-objects")
@app_option
@click.option(
    "--log-level",
    default="warning",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    help="How much the library logs to stderr.",
)
def main(log_level: str, target: str | None = None) -> None:
    """Durable virtual actors in the SQL database you already run.

    The commands that act on an application take its runtime as MODULE:RUNTIME
    (e.g. solid-objects status myapp.actors:runtime). Name it once instead with
    -A/--app before the command (solid-objects -A myapp.actors:runtime status) or
    in the SOLID_OBJECTS_APP environment variable; a MODULE:RUNTIME argument given
    to a command wins over both.
    """
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


@click.command()
def quickstart() -> None:
    """Run a self-verifying demo on a temporary SQLite database."""
    from .. import quickstart as demo

    try:
        demo.run(click.echo)
    except AssertionError as exc:
        click.echo(f"FAILED: {exc}", err=True)
        sys.exit(EXIT_FAILED)


main.add_command(quickstart)
for _module in (worker, inspection, operations, dashboard):
    _module.register(main)
