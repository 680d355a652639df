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

from . import dashboard, inspection, operations, worker
from .common import EXIT_FAILED


@click.group()
@click.option(
    "--log-level",
    default="warning",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    help="How much the library logs to stderr.",
)
def main(log_level: str) -> None:
    """Durable virtual actors in the SQL database you already run."""
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
