"""``manage.py solid_objects worker|doctor|status|dead-letters ...``: the CLI on Django's runtime.

Every ``solid-objects`` command runs as it does from the shell, on the runtime built
from ``settings.DATABASES`` (``solid_objects.contrib.django:runtime``). The commands
are the command line's own, copied without their ``MODULE:RUNTIME`` argument: the
project's runtime is supplied, and ``--help`` says so instead of asking for one.
"""

from __future__ import annotations

import copy
import functools
import os
from argparse import REMAINDER, ArgumentParser
from typing import Any

import click
from django.core.management.base import BaseCommand

#: The runtime every command that takes one is given.
TARGET = "solid_objects.contrib.django:runtime"
#: What the help says instead of the ``MODULE:RUNTIME`` argument.
_RUNTIME = "the project's runtime"


def _reword(text: str | None) -> str | None:
    if text is None:
        return None
    for phrase in ("the runtime MODULE:RUNTIME", "MODULE:RUNTIME"):
        text = text.replace(phrase, _RUNTIME)
    return text


def for_project(command: click.Command, target: str = TARGET) -> click.Command:
    """A copy of ``command`` (and its subcommands) with ``target`` as the runtime.

    The ``target`` argument is dropped from every command that takes one and passed
    to its callback instead; help texts name the project's runtime.
    """
    derived = copy.copy(command)
    derived.help = _reword(command.help)
    derived.short_help = _reword(command.short_help)
    if any(param.name == "target" for param in command.params):
        derived.params = [param for param in command.params if param.name != "target"]
        if command.callback is not None:
            derived.callback = functools.update_wrapper(
                functools.partial(command.callback, target=target), command.callback
            )
    if isinstance(command, click.Group) and isinstance(derived, click.Group):
        derived.commands = {
            name: for_project(sub, target)
            for name, sub in command.commands.items()
            if name != "quickstart"  # a demo on a temporary database, not on the project's
        }
    return derived


@functools.cache
def project_cli() -> click.Command:
    """The ``solid-objects`` group as ``manage.py solid_objects`` runs it."""
    from solid_objects.cli.main import main

    group = for_project(main)
    group.help = (
        "The solid-objects command line on this project's runtime (settings.DATABASES, "
        "settings.SOLID_OBJECTS)."
    )
    return group


class Command(BaseCommand):
    help = (
        "The solid-objects command line on this project's runtime: worker, doctor, status, "
        "actors, dead-letters, ... (manage.py solid_objects --help lists them)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "args", nargs=REMAINDER, metavar="COMMAND", help="a solid-objects command"
        )

    def print_help(self, prog_name: str, subcommand: str) -> None:
        # ``manage.py help solid_objects`` shows the commands, as --help does.
        self.run(["--help"], prog=f"{os.path.basename(prog_name)} {subcommand}")

    def run_from_argv(self, argv: list[str]) -> None:
        # Click parses the arguments, not argparse: options pass through untouched.
        self.run(argv[2:], prog=f"{os.path.basename(argv[0])} {argv[1]}")

    def handle(self, *args: str, **options: Any) -> None:
        self.run(list(args), prog="solid_objects")

    def run(self, args: list[str], prog: str) -> None:
        project_cli().main(args=args, prog_name=prog)
