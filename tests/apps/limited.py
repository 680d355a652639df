"""A worker process that may not grow any file past a size: a disk full for it alone.

    python -m tests.apps.limited BYTES worker tests.apps.limited:runtime

sets ``RLIMIT_FSIZE`` to BYTES (writes past it fail with ``EFBIG``, as the kernel
reports a quota or a full volume; ``SIGXFSZ`` is ignored so the write fails instead
of killing the process) and runs the command line with the remaining arguments.
``SIGUSR1`` lifts the limit: the space is back. Unlike a tmpfs mount this needs no
root. ``runtime`` (``SOLID_TEST_DB``, ``SOLID_TEST_OPTIONS``) runs ``Blob``.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
from typing import Any

from solid_objects import Actor, Runtime


class Blob(Actor):
    """``data`` grows by ``kb`` KiB per call: a turn whose commit needs real space."""

    data: str = ""
    calls: int = 0

    def grow(self, kb: int = 0) -> int:
        self.data += "x" * (kb * 1024)
        self.calls += 1
        return self.calls


def build_runtime() -> Runtime:
    options = {"workers": 1, **json.loads(os.environ.get("SOLID_TEST_OPTIONS") or "{}")}
    runtime = Runtime(os.environ["SOLID_TEST_DB"], **options)
    runtime.register(Blob)
    return runtime


def _lift(_signum: int, _frame: Any) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    print("file size limit lifted", file=sys.stderr, flush=True)


def main(argv: list[str]) -> None:
    limit = int(argv[0])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, _lift)
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    print(f"file size limit: {limit}", file=sys.stderr, flush=True)
    from solid_objects.cli import main as cli

    cli(argv[1:], prog_name="solid-objects")


def __getattr__(name: str) -> Any:
    if name == "runtime":
        value = build_runtime()
        globals()["runtime"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
