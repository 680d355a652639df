"""Schema installation: idempotent, versioned, safe from several processes at once."""

from __future__ import annotations

import multiprocessing

import pytest

from solid_objects import Actor, Runtime
from solid_objects.errors import SchemaNotInstalled
from solid_objects.store.schema import SCHEMA_VERSION


class Thing(Actor):
    n: int = 0

    def bump(self) -> int:
        self.n += 1
        return self.n


def _install(url: str) -> None:
    runtime = Runtime(url, workers=0)
    runtime.install()
    runtime.close()


def test_using_an_uninstalled_database_says_how_to_fix_it(db_url: str) -> None:
    runtime = Runtime(db_url, workers=0)
    with pytest.raises(SchemaNotInstalled, match="install"):
        runtime.ref(Thing, "a").bump.send()
    runtime.close()


def test_install_is_idempotent_and_concurrent_installs_are_safe(db_url: str) -> None:
    url = db_url
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_install, args=(url,)) for _ in range(4)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(60)
    assert [p.exitcode for p in processes] == [0, 0, 0, 0]
    runtime = Runtime(url, workers=0)
    runtime.install()
    with runtime.store.read() as tx:
        assert tx.rows("SELECT name, version FROM solid_schema") == [
            ("solid_objects", SCHEMA_VERSION)
        ]
    message = runtime.ref(Thing, "a").bump.send()
    runtime.testing.drain()
    assert message.result() == 1
    runtime.close()
