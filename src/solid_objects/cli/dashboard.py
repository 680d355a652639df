"""``dashboard``: serve the operator dashboard alone, on loopback, behind an access token."""

from __future__ import annotations

import secrets
import socket
import sys

import click

from .common import load_runtime, target_argument

GRANT = 'runtime.admin.set_policy(allow({"dashboard:local": "*"}))'


@click.command()
@target_argument
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="Port to listen on (0: any free port).",
)
def dashboard(target: str, host: str, port: int) -> None:
    """Serve the operator dashboard of MODULE:RUNTIME until SIGINT or SIGTERM.

    The first line of output is the URL to open; it carries a random access
    token. Its holder acts as the principal dashboard:local, which the
    application grants like any other principal.
    """
    try:
        import uvicorn

        from ..web.local import LOCAL_PRINCIPAL, LocalServer, local_dashboard
    except ImportError as exc:
        raise click.UsageError(
            f"the dashboard needs the web extra ({exc.name} is missing): "
            "pip install 'solid-objects[web]'"
        ) from None
    runtime = load_runtime(target)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)  # connections to the printed URL wait for uvicorn, not fail
    except OSError as exc:
        sock.close()
        raise click.UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    bound = sock.getsockname()[1]
    token = secrets.token_urlsafe(32)
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"http://{shown}:{bound}/?token={token}")
    sys.stdout.flush()
    click.echo(
        f"solid-objects dashboard of {target}: acting as {LOCAL_PRINCIPAL}; the application "
        f"grants it, e.g. {GRANT}",
        err=True,
    )
    if not runtime.admin.as_principal(LOCAL_PRINCIPAL).allowed("status"):
        click.echo(
            f"warning: the administration policy does not let {LOCAL_PRINCIPAL} read the "
            "status: pages will answer 403 until the application grants it",
            err=True,
        )
    if host not in ("127.0.0.1", "::1", "localhost"):
        click.echo(
            f"warning: listening on {host}, not loopback: the token travels in clear text "
            "over plain HTTP; put the dashboard behind TLS",
            err=True,
        )
    server = LocalServer(
        uvicorn.Config(local_dashboard(runtime, token), log_level="warning", access_log=False)
    )
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        # The runtime never started workers here: dispose of it without the lease
        # release that Runtime.close() writes.
        runtime.store.close()
        runtime.engine.dispose()


def register(main: click.Group) -> None:
    main.add_command(dashboard)
