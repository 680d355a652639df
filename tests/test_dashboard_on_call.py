"""The dashboard for the person on call, in Chromium: work that is being retried,
what an actor is doing, dead letters under every filter, what a retry did, the types
to start from, and the audit trail as links with its whole detail.

A runtime with a long retry backoff, so failed work stays visibly "retrying".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import playwright.sync_api as playwright_api
import pytest

from solid_objects import Actor, Runtime
from solid_objects.admin import allow
from solid_objects.engine.effects import EffectContext
from solid_objects.errors import InvalidArguments

from .conftest import FAST, fresh_database
from .test_dashboard_browser import Watched, browser, open_as, serve

__all__ = ["browser", "open_as"]  # the fixtures this module borrows

pytestmark = pytest.mark.slow
expect = playwright_api.expect


class Flaky(Actor):
    """``poke`` fails (retryably) while the backend is down, and emits ``notify``."""

    down: ClassVar[bool] = True
    pokes: int = 0

    def poke(self) -> int:
        if Flaky.down:
            raise RuntimeError("backend unavailable")
        self.pokes += 1
        return self.pokes

    def announce(self) -> None:
        self.emit("notify", text="hello")


class Jammed(Actor):
    items: list[str] = []

    def store(self, item: str) -> None:
        if "bad" in item:
            raise InvalidArguments(f"the safe is jammed by {item}")
        self.items.append(item)


def notify(ctx: EffectContext, text: str) -> None:
    raise RuntimeError("mail server refused")


@pytest.fixture(params=["sqlite", "postgresql"])
def rt(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Runtime]:
    Flaky.down = True
    options = {**FAST, "workers": 0, "retry_base_delay": 600.0, "retry_max_delay": 600.0}
    with fresh_database(str(request.param), tmp_path) as url:
        runtime = Runtime(url, **options)
        runtime.install()
        runtime.register(Flaky)
        runtime.register(Jammed)
        runtime.effect("notify")(notify)
        runtime.admin.set_policy(allow({"ops:*": "*"}))
        try:
            yield runtime
        finally:
            runtime.close()


@pytest.fixture
def served(rt: Runtime) -> Iterator[str]:
    with serve(rt) as url:
        yield url


def test_retrying_messages_and_effects_are_listed_with_attempt_next_time_and_error(
    rt: Runtime, served: str, open_as: Callable[[str | None], Watched]
) -> None:
    rt.ref(Flaky, "f1").poke.send()
    rt.ref(Flaky, "f2").announce.send()
    rt.testing.drain()  # poke fails once and backs off; notify fails once and backs off
    page = open_as("ops:alice").page
    page.goto(served + "/")
    page.locator("#counts tr.total").get_by_role("link", name="1").first.click()
    expect(page).to_have_url(served + "/retrying")
    row = page.locator("#retrying-messages tr.retrying")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("Flaky f1")
    expect(row).to_contain_text("poke")
    expect(row).to_contain_text(f"of {rt.options.max_attempts}")
    expect(row).to_contain_text("backend unavailable")
    # The failure's traceback is where its error is: the file and line that raised.
    expect(row.locator("pre.traceback")).to_contain_text("test_dashboard_on_call.py")
    effect = page.locator("#retrying-effects tr.retrying")
    expect(effect).to_have_count(1)
    expect(effect).to_contain_text("notify")
    expect(effect).to_contain_text(f"1 of {rt.options.effect_max_attempts}")
    expect(effect).to_contain_text("mail server refused")
    expect(effect.locator("pre.traceback")).to_contain_text("in notify")
    # The Effects page has the same view as a filter, with the next attempt time.
    page.goto(served + "/effects?status=retrying")
    expect(page.locator("thead")).to_contain_text("Next attempt")
    expect(page.locator("tbody")).to_contain_text("mail server refused")


def test_a_dead_letter_is_acted_on_from_every_view_and_the_retry_is_traced(
    rt: Runtime, served: str, open_as: Callable[[str | None], Watched]
) -> None:
    jammed = rt.ref(Jammed, "j1")
    jammed.store.send(item="ok")
    dead = jammed.store.send(item="bad")
    rt.testing.drain()
    page = open_as("ops:alice").page

    # The actors page starts from the registered types.
    page.goto(served + "/actors")
    page.locator("#types-list").get_by_role("link", name="Jammed").click()
    page.get_by_role("link", name="j1", exact=True).click()
    expect(page.locator("#paused")).to_have_text("idle, with an open dead letter")

    # Under "all", an open letter is labelled and has its Retry button.
    page.goto(served + "/dead-letters?state=all")
    row = page.locator("tr.letter", has_text="the safe is jammed")
    expect(row).to_contain_text("open")
    row.get_by_role("button", name="Retry").click()
    banner = page.locator("#retried")
    expect(banner).to_contain_text("Retried 1 dead letter")
    expect(banner).to_contain_text(dead.id)
    banner.get_by_role("link", name="see its outcome on Jammed j1").click()
    expect(page.locator("h1")).to_contain_text("Jammed")
    # The retry is among the actor's operator changes, though its target is the letter.
    expect(page.locator("table", has_text="dead_letters.retry")).to_have_count(1)

    # The audit log links its targets and keeps the whole detail.
    page.goto(served + "/audit")
    entry = page.locator("tr", has_text="dead_letters.retry")
    entry.get_by_role("link", name=dead.id).click()
    expect(page.locator("h1")).to_contain_text("j1")
    page.goto(served + "/audit")
    entry = page.locator("tr", has_text="dead_letters.retry")
    entry.locator("summary").click()
    expect(entry.locator("pre.detail")).to_be_visible()


def test_a_traceback_is_folded_where_its_error_is_escaped_and_stays_open_across_refreshes(
    rt: Runtime, served: str, open_as: Callable[[str | None], Watched]
) -> None:
    rt.ref(Flaky, "f1").poke.send()
    rt.ref(Flaky, "f2").announce.send()
    rt.ref(Jammed, "j1").store.send(item="<b>bad</b>")
    rt.testing.drain()
    page = open_as("ops:alice").page
    where = {
        "/dead-letters": "in store",
        "/retrying": "in poke",
        "/effects?status=retrying": "in notify",
        "/actors/Flaky/f1": "in poke",  # the failing head message in the mailbox
        "/actors/Jammed/j1": "in store",
    }
    for path, frame in where.items():
        page.goto(served + path)
        fold = page.locator("details.traceback").first
        trace = fold.locator("pre.traceback")
        expect(trace).to_be_hidden()  # folded: the tables stay readable
        fold.locator("summary").click()
        expect(trace).to_be_visible()
        expect(trace).to_contain_text("test_dashboard_on_call.py")
        expect(trace).to_contain_text(frame)
    page.goto(served + "/dead-letters")
    page.locator("details.traceback summary").first.click()
    expect(page.locator("pre.traceback").first).to_contain_text("<b>bad</b>")
    assert page.locator("pre.traceback b").count() == 0  # shown as text, not markup
    # The actor page refreshes itself; an opened traceback stays open through it.
    page.goto(served + "/actors/Flaky/f1")
    page.locator("details.traceback summary").first.click()
    page.evaluate(
        "() => new Promise(r => document.body.addEventListener("
        "'htmx:afterSettle', () => r(true), {once: true}))"
    )
    expect(page.locator("pre.traceback").first).to_be_visible()


def test_the_admin_api_behind_those_views(make_runtime: Callable[..., Runtime]) -> None:
    """Every backend: retrying messages and effects, and the audit of one actor."""
    Flaky.down = True
    runtime = make_runtime(workers=0, retry_base_delay=600.0, retry_max_delay=600.0)
    runtime.effect("notify")(notify)
    runtime.admin.set_policy(allow({"ops:*": "*"}))
    ops = runtime.admin.as_principal("ops:x")
    runtime.ref(Flaky, "f1").poke.send()
    runtime.ref(Flaky, "f2").announce.send()
    dead = runtime.ref(Jammed, "j1").store.send(item="bad")
    runtime.testing.drain()
    (retrying,) = ops.retrying_messages()
    assert (retrying.actor_id, retrying.attempt, retrying.message.operation) == ("f1", 1, "poke")
    assert retrying.next_attempt_at is not None and "backend" in str(retrying.message.error)
    (effect,) = ops.list_effects(status="retrying").items
    assert (effect.name, effect.attempts) == ("notify", 1)
    ops.pause_actor("Jammed", "j1")
    ops.retry_dead_letter(dead.id)
    actions = [e.action for e in ops.audit_log(actor_type="Jammed", actor_id="j1").items]
    assert actions == ["dead_letters.retry", "actors.pause"]
    assert [e.action for e in ops.audit_log(target_id="Jammed/j1").items] == ["actors.pause"]
