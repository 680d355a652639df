"""``manage.py solid_objects worker|doctor|status|dead-letters ...``: the CLI on Django's runtime.

Every ``solid-objects`` command runs as it does from the shell, with the
``MODULE:RUNTIME`` target supplied: ``solid_objects.contrib.django:runtime``, the
runtime built from ``settings.DATABASES`` (see :mod:`solid_objects.contrib.django`).
"""

from __future__ import annotations

import os
from argparse import REMAINDER, ArgumentParser
from typing import Any

import click
from django.core.management.base import BaseCommand

#: The target every command that takes one is given.
TARGET = "solid_objects.contrib.django:runtime"


def with_target(group: click.Group, args: list[str], target: str = TARGET) -> list[str]:
    """``args`` with ``target`` inserted where the chosen command expects ``MODULE:RUNTIME``.

    Walks the group's options and subcommand names (``dead-letters list`` is two), and
    inserts the target as the first argument of the command reached, if it takes one.
    """
    args = list(args)
    command: click.Command = group
    index = 0
    while isinstance(command, click.Group):
        while index < len(args) and args[index].startswith("-"):
            name, _, inline = args[index].partition("=")
            index += 1
            option = next(
                (p for p in command.params if isinstance(p, click.Option) and name in p.opts),
                None,
            )
            if option is not None and not option.is_flag and not inline:
                index += 1  # the option's value
        if index >= len(args):
            return args
        sub = command.get_command(click.Context(command), args[index])
        if sub is None:
            return args  # click reports the unknown command
        command = sub
        index += 1
    if any(param.name == "target" for param in command.params):
        args.insert(index, target)
    return args


class Command(BaseCommand):
    help = (
        "The solid-objects command line on this project's runtime: "
        "worker, doctor, status, actors, dead-letters, ... (--help lists them)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("args", nargs=REMAINDER, help="a solid-objects command")

    def run_from_argv(self, argv: list[str]) -> None:
        # Click parses the arguments, not argparse: options pass through untouched.
        self.run(argv[2:], prog=f"{os.path.basename(argv[0])} {argv[1]}")

    def handle(self, *args: str, **options: Any) -> None:
        self.run(list(args), prog="solid_objects")

    def run(self, args: list[str], prog: str) -> None:
        from solid_objects.cli.main import main

        main.main(args=with_target(main, args), prog_name=prog)
