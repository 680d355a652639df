"""``worker`` and ``install``: the commands a deployment runs."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import click

from ..errors import SchemaNotInstalled, SolidObjectsError
from ..runtime import Runtime
from .common import EXIT_FAILED, load_runtime, target_argument

#: The stop's INFO lines (``engine/worker.py``) and the exit line, shown at INFO.
shutdown_log = logging.getLogger("solid_objects.shutdown")


@click.command()
@target_argument
@click.option("--workers", type=int, default=None, help="Worker threads (default: the runtime's).")
@click.option("--install/--no-install", default=False, help="Install or upgrade the schema first.")
@click.option(
    "--health-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve GET /healthz on this port (200 healthy, 503 not) for Kubernetes probes.",
)
@click.option(
    "--health-host",
    default="127.0.0.1",
    show_default=True,
    help="Interface the health endpoint listens on; it has no authentication, so only "
    "loopback unless given (a Kubernetes probe needs 0.0.0.0).",
)
def worker(
    target: str, workers: int | None, install: bool, health_port: int | None, health_host: str
) -> None:
    """Run the workers of the runtime MODULE:RUNTIME until SIGTERM or SIGINT.

    On the first signal the worker finishes in-flight turns, releases its
    leases so other workers take over at once, and exits 0.
    """
    with _stop_signals_remembered() as stop_early:
        _run_worker(target, workers, install, health_port, health_host, stop_early)


@contextmanager
def _stop_signals_remembered() -> Iterator[threading.Event]:
    """Remember a SIGTERM/SIGINT that arrives before the worker loop runs.

    Loading the application and installing take a while; a supervisor's SIGTERM in that
    window would end the process by the signal (exit -15, before ``close()``). With
    this the command stops cleanly and exits 0, as after a signal during ``run()``
    (which installs its own handlers while it runs).
    """
    stop_early = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop_early.set())
        for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        yield stop_early
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_worker(
    target: str,
    workers: int | None,
    install: bool,
    health_port: int | None,
    health_host: str,
    stop_early: threading.Event,
) -> None:
    if shutdown_log.getEffectiveLevel() > logging.INFO:
        # A deployment sees its worker stop step by step without asking for INFO.
        shutdown_log.setLevel(logging.INFO)
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
        else:
            # Before the banner: a worker that cannot run says so first, not after
            # announcing its threads.
            runtime.store.check_installed()
        click.echo(
            f"solid-objects worker {runtime.owner}: {runtime.options.workers} threads, "
            f"types {runtime.registry.types()}",
            err=True,
        )
        if health_port is not None:
            from ..doctor import serve_health

            # Workers first: a readiness probe must not see "ok" before the worker
            # loop runs (run() below finds them started).
            runtime.start()
            try:
                server = serve_health(runtime, health_port, host=health_host)
            except OSError as exc:
                raise click.BadParameter(
                    f"cannot listen on {health_host}:{health_port}: {exc}",
                    param_hint="--health-host/--health-port",
                ) from None
            host, port = (str(part) for part in server.server_address[:2])
            click.echo(f"health check on http://{host}:{port}/healthz", err=True)
        if stop_early.is_set():
            click.echo("stopped before the worker loop started (signal)", err=True)
            return
        runtime.run()
    except SchemaNotInstalled as exc:
        click.echo(
            f"error: {exc}\nInstall first with `solid-objects install {target}`, or start "
            "the worker with --install.",
            err=True,
        )
        sys.exit(EXIT_FAILED)
    except SolidObjectsError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_FAILED)
    finally:
        runtime.close()
    shutdown_log.info("worker %s exits", runtime.owner, extra={"solid_action": "worker_exit"})


def _with_workers(runtime: Runtime, workers: int) -> Runtime:
    """A runtime like ``runtime`` (same database, same actors) with ``workers`` threads."""
    options = {f: getattr(runtime.options, f) for f in runtime.options.__dataclass_fields__}
    options["workers"] = workers
    # Through its engine, not its URL: an application engine's connect_args and
    # listeners still make the connections (database.py).
    fresh = Runtime(runtime.engine, **options)
    for actor_type in runtime.registry.types():
        fresh.register(runtime.registry.get(actor_type).cls)
    for name in runtime.effects.names():
        fresh.effect(name, max_duration=runtime.effects.max_duration(name))(
            runtime.effects.get(name)
        )
    for name in runtime.commit_actions.names():
        fresh.commit_action(name)(runtime.commit_actions.get(name))
    fresh.admin.set_policy(runtime.admin.policy)
    runtime.close()
    return fresh


@click.command()
@target_argument
@click.option(
    "--sql",
    "show_sql",
    is_flag=True,
    help="Print the DDL of a fresh install for this database instead of running it.",
)
def install(target: str, show_sql: bool) -> None:
    """Create or upgrade the Solid Objects tables of the runtime MODULE:RUNTIME."""
    runtime = load_runtime(target)
    try:
        if show_sql:
            click.echo(runtime.store.install_sql())
            return
        runtime.install()
        click.echo("installed")
    except SolidObjectsError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_FAILED)
    finally:
        runtime.close()


def register(main: click.Group) -> None:
    main.add_command(worker)
    main.add_command(install)
