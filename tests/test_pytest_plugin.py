"""The pytest plugin (``solid_objects.pytest_plugin``), as an application's test suite uses it.

Each test writes a small test module and runs pytest on it in a subprocess, so
the plugin is loaded the way an application gets it: from the entry point.
"""

from __future__ import annotations

import os

import pytest

from .conftest import BACKENDS, SERVER_VARIABLES

pytest_plugins = ["pytester"]

APP_TESTS = '''
from datetime import timedelta

from solid_objects import Actor


class Cart(Actor):
    items: list[str] = []

    def add(self, sku: str) -> int:
        self.items.append(sku)
        return len(self.items)

    def remind_later(self) -> None:
        self.schedule(delay=timedelta(days=3)).add(sku="reminder")


def test_calls_run_when_the_test_drains(solid_runtime):
    cart = solid_runtime.ref(Cart, "c1")
    sent = cart.add.send(sku="x")
    assert sent.status() == "queued"
    assert solid_runtime.testing.drain() == 1
    assert sent.result() == 1
    assert cart.snapshot() == {"items": ["x"]}


def test_each_test_gets_an_empty_database(solid_runtime):
    assert solid_runtime.ref(Cart, "c1").snapshot() == {"items": []}


def test_the_clock_is_the_tests(solid_runtime):
    from datetime import datetime, timezone

    cart = solid_runtime.ref(Cart, "c2")
    cart.remind_later.send()
    solid_runtime.testing.drain()
    later = datetime.now(timezone.utc) + timedelta(days=3, minutes=1)
    assert solid_runtime.testing.run_due_reminders(later) == 1
    assert cart.snapshot() == {"items": ["reminder"]}


def test_a_factory_for_runtimes_with_workers(solid_runtime_factory):
    with solid_runtime_factory(workers=2) as runtime:
        assert runtime.ref(Cart, "c3").add(sku="y") == 1
'''


def test_the_fixtures_give_isolated_installed_runtimes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_app=APP_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)


@pytest.mark.parametrize("server", [b for b in BACKENDS if b != "sqlite"])
def test_the_fixtures_run_on_a_server_given_by_url(pytester: pytest.Pytester, server: str) -> None:
    url = os.environ[SERVER_VARIABLES[server]]
    pytester.makepyfile(test_app=APP_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--solid-db", url)
    result.assert_outcomes(passed=4)
