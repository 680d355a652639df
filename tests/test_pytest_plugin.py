"""The pytest plugin (``solid_objects.pytest_plugin``), as an application's test suite uses it.

Each test writes a small test module and runs pytest on it in a subprocess, so
the plugin is loaded the way an application gets it: from the entry point.
"""

from __future__ import annotations

import os

import pytest

from .conftest import BACKENDS, SERVER_VARIABLES

pytest_plugins = ["pytester"]

APP_TESTS = """
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
"""


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


# --- the application's own registrations -------------------------------------

APP_MODULE = """
from solid_objects import Actor, Runtime
from solid_objects.admin import allow

RECEIPTS = []
RECORDED = []


class Shop(Actor):
    sold: list[str] = []

    def buy(self, sku: str) -> int:
        self.sold.append(sku)
        self.emit("receipt", sku=sku)
        self.commit_action("record", sku=sku)
        return len(self.sold)

    def broken(self) -> None:
        raise ConnectionError("retryable, but max_attempts=1 here")


# The application's production runtime: the fixtures copy it, and never open its database.
runtime = Runtime("sqlite:////nonexistent-directory/production.db", max_attempts=1, actors=[Shop])
runtime.admin.set_policy(allow({"ops:*": "read"}))


@runtime.effect("receipt")
def receipt(ctx, sku):
    RECEIPTS.append(sku)


@runtime.commit_action("record")
def record(ctx, sku):
    RECORDED.append(sku)
"""

REGISTRATION_TESTS = """
import pytest

from solid_objects import AsyncRuntime, Runtime
from solid_objects.errors import MessageFailed
from shopapp import RECEIPTS, RECORDED, Shop


def test_the_runtime_has_the_applications_registrations(solid_runtime):
    assert "production.db" not in str(solid_runtime.engine.url)
    shop = solid_runtime.ref(Shop, "s")
    sent = shop.buy.send(sku="x")
    solid_runtime.testing.drain()
    assert sent.result() == 1
    assert RECEIPTS == ["x"] and RECORDED == ["x"]  # its effect handler and commit action
    failed = shop.broken.send()
    solid_runtime.testing.drain()
    with pytest.raises(MessageFailed):  # its options: max_attempts=1
        failed.result()
    assert solid_runtime.admin.as_principal("ops:t").status().total.actors == 1  # its policy


def test_effects_are_captured_without_running_the_handler(solid_runtime):
    with solid_runtime.testing.capture_effects() as effects:
        solid_runtime.ref(Shop, "c").buy.send(sku="held")
        solid_runtime.testing.drain()
    assert effects.names() == ["receipt"] and effects[0].arguments == {"sku": "held"}
    assert "held" not in RECEIPTS and "held" in RECORDED


def test_reset_empties_the_tables_between_steps(solid_runtime):
    solid_runtime.ref(Shop, "r").buy.send(sku="y")
    solid_runtime.testing.drain()
    solid_runtime.testing.reset()
    assert solid_runtime.ref(Shop, "r").snapshot() == {"sold": []}


def test_the_factory_makes_runtimes_like_the_application(solid_runtime_factory):
    with solid_runtime_factory(workers=2, max_attempts=3) as runtime:
        assert runtime.options.max_attempts == 3  # the test's options win
        assert runtime.ref(Shop, "w").buy(sku="z") == 1


@pytest.mark.anyio
async def test_the_async_face(solid_async_runtime):
    assert isinstance(solid_async_runtime, AsyncRuntime)
    shop = solid_async_runtime.ref(Shop, "a")
    sent = await shop.buy.send(sku="async")
    await solid_async_runtime.testing.drain()
    assert await sent.result() == 1 and "async" in RECEIPTS
    async with solid_async_runtime.testing.capture_effects() as effects:
        await shop.buy.send(sku="async-held")
        await solid_async_runtime.testing.drain()
    assert effects.names() == ["receipt"] and "async-held" not in RECEIPTS
    await solid_async_runtime.testing.reset()
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_fixtures_take_the_applications_runtime_from_the_ini_file(
    pytester: pytest.Pytester, backend: str
) -> None:
    pytester.makepyfile(shopapp=APP_MODULE, test_shop=REGISTRATION_TESTS)
    pytester.makeini("[pytest]\nsolid_objects_runtime = shopapp:runtime\n")
    server = [] if backend == "sqlite" else ["--solid-db", os.environ[SERVER_VARIABLES[backend]]]
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *server)
    result.assert_outcomes(passed=5)


def test_an_overridden_fixture_gives_the_applications_runtime(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(shopapp=APP_MODULE, test_shop=REGISTRATION_TESTS)
    pytester.makeconftest(
        "import pytest\n\n\n@pytest.fixture(scope='session')\ndef solid_app_runtime():\n"
        "    from shopapp import runtime\n\n    return runtime\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)


def test_a_bad_runtime_target_is_a_clear_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_app=APP_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--solid-runtime", "nosuch:rt")
    result.assert_outcomes(passed=0, errors=4)
    result.stdout.fnmatch_lines(
        ["*solid_objects_runtime = nosuch:rt: cannot import module 'nosuch'*"]
    )
