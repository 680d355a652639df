"""Run the ``solid-objects`` command in a process whose wall clock is wrong.

    python -m tests.apps.skewed SECONDS worker tests.apps.clockapp:runtime

shifts ``time.time``, ``time.time_ns`` and ``datetime.now``/``utcnow``/``today``
by SECONDS (negative: behind) before Solid Objects is imported, as a host whose
clock drifted or was set wrong would see them, then runs the command line with
the remaining arguments. ``time.monotonic`` is left alone, as NTP leaves it.
It prints ``skewed clock: <offset> <time.time()>`` to stderr first, so a test
can check that the skew is in force in the worker.
"""

from __future__ import annotations

import datetime as _datetime
import os
import sys
import time as _time
from typing import Any

_real_time = _time.time
_real_time_ns = _time.time_ns
_RealDateTime = _datetime.datetime


def install(offset: float) -> None:
    """Make every wall-clock reading of this process ``offset`` seconds wrong."""
    delta = _datetime.timedelta(seconds=offset)

    def time() -> float:
        return _real_time() + offset

    def time_ns() -> int:
        return _real_time_ns() + int(offset * 1e9)

    class SkewedDateTime(_RealDateTime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return _RealDateTime.now(tz) + delta

        @classmethod
        def utcnow(cls) -> Any:
            return _RealDateTime.now(_datetime.UTC).replace(tzinfo=None) + delta

        @classmethod
        def today(cls) -> Any:
            return cls.now()

    _time.time = time
    _time.time_ns = time_ns
    _datetime.datetime = SkewedDateTime  # type: ignore[misc]


def plant_local_clock() -> None:
    """A planted bug for the tests of the tests: SQLite's ``{now}`` reads this process's
    wall clock instead of the database's, as a library timing leases locally would."""
    from sqlalchemy import Engine, event

    from solid_objects.store.dialect import sqlite as dialect

    configure = dialect.SQLiteDialect.configure

    def local_configure(self: Any, engine: Engine, options: dict[str, Any]) -> None:
        configure(self, engine, options)

        @event.listens_for(engine, "connect")
        def _connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.create_function("solid_local_now", 0, lambda: int(_time.time() * 1000))

    dialect.SQLiteDialect.configure = local_configure  # type: ignore[method-assign]
    dialect.SQLiteDialect.now_ms = "solid_local_now()"


def main(argv: list[str]) -> None:
    offset = float(argv[0])
    install(offset)
    if os.environ.get("SOLID_SKEW_PLANT_LOCAL_CLOCK") == "1":
        plant_local_clock()
    print(f"skewed clock: {offset:+.0f} {_time.time():.3f}", file=sys.stderr, flush=True)
    from solid_objects.cli import main as cli

    cli(argv[1:], prog_name="solid-objects")


if __name__ == "__main__":
    main(sys.argv[1:])
