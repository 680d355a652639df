"""Cross-process wake-ups through PostgreSQL ``LISTEN/NOTIFY``.

Commits that another process may be waiting for send ``pg_notify`` *inside*
the committing transaction (PostgreSQL delivers it only if the transaction
commits): ``w`` when an actor has new work nobody here holds, ``d:<id>`` when
a message finished. One listening connection per runtime, outside the pool,
turns ``w`` into a poller wake-up and ``d:<id>`` into a nudge for a caller
waiting on that message. Polling stays the durable fallback: a lost
notification only costs latency. Other databases have no listener.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine

log = logging.getLogger("solid_objects.wakeup")


class PostgresListener:
    def __init__(
        self, engine: Engine, channel: Callable[[], str], on_payload: Callable[[str], None]
    ) -> None:
        self._engine = engine
        self._channel = channel
        self._on_payload = on_payload
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.listening = threading.Event()

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="solid-listen", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(5)

    def _connect(self) -> Any:
        import psycopg

        args, kwargs = self._engine.dialect.create_connect_args(self._engine.url)
        kwargs.pop("context", None)
        conn = psycopg.connect(*args, **kwargs, autocommit=True)
        conn.execute(f'LISTEN "{self._channel()}"')
        return conn

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                conn = self._connect()
            except Exception as exc:
                log.warning("cannot LISTEN (%r); polling only, retrying in %.1fs", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.1
            self.listening.set()
            # Something may have been notified while we were not listening.
            self._on_payload("w")
            try:
                while not self._stop.is_set():
                    for notify in conn.notifies(timeout=1.0):
                        self._on_payload(notify.payload)
            except Exception as exc:
                log.warning("LISTEN connection lost (%r); reconnecting", exc)
                time.sleep(0.05)
            finally:
                self.listening.clear()
                try:
                    conn.close()
                except Exception:
                    pass
