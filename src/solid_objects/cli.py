"""The ``solid-objects`` command line.

Commands that need the application's actors take its runtime as
``module:attribute`` (like uvicorn), e.g. ``solid-objects worker myapp.actors:runtime``.
Exit codes: 0 success, 1 a check or operation failed, 2 bad usage or a
target that cannot be loaded.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from typing import Any

import click

from .errors import SolidObjectsError
from .runtime import AsyncRuntime, Runtime


def load_runtime(target: str) -> Runtime:
    """Import ``module:attribute`` and return the Runtime it names."""
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
    try:
        value: Any = module
        for part in attribute.split("."):
            value = getattr(value, part)
    except AttributeError:
        raise click.UsageError(f"module {module_name!r} has no attribute {attribute!r}") from None
    if callable(value) and not isinstance(value, Runtime | AsyncRuntime):
        value = value()
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
def worker(target: str, workers: int | None, install: bool) -> None:
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
    runtime.close()
    return fresh


@main.command()
@click.argument("target")
def install(target: str) -> None:
    """Create or upgrade the Solid Objects tables for TARGET (module:runtime)."""
    runtime = load_runtime(target)
    try:
        runtime.install()
        click.echo("installed")
    except SolidObjectsError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    finally:
        runtime.close()


if __name__ == "__main__":
    main()
