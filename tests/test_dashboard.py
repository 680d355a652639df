"""The operator dashboard over HTTP (Starlette's TestClient), on every backend.

Who may do what is the administration policy's decision; these tests check that
the dashboard asks it for every read and write, and its browser defences: 401,
403 for a forged or token-less POST, the security headers, escaping.
"""

from __future__ import annotations

import re
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import ClassVar

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from solid_objects import Actor, Runtime
from solid_objects.admin import allow
from solid_objects.errors import InvalidArguments
from solid_objects.web import dashboard
from solid_objects.web.security import CsrfTokens

from .conftest import count_rows

with warnings.catch_warnings():  # Starlette 1.x prefers httpx2; httpx works the same here
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

XSS = "<script>alert('xss')</script>"
PAGES = ["/", "/activity", "/actors", "/actors?type=Vault", "/actors/Vault/v1", "/dead-letters",
         "/effects", "/reminders", "/processes", "/audit"]  # fmt: skip


class Vault(Actor):
    """``store`` fails for good while ``broken``: the bug an operator fixes, then retries."""

    broken: ClassVar[bool] = False
    items: list[str] = []

    def store(self, item: str) -> list[str]:
        if Vault.broken:
            raise InvalidArguments("the vault is broken")
        self.items.append(item)
        return list(self.items)

    def plan(self) -> None:
        self.schedule(delay=timedelta(hours=1), key="nightly").store(item="nightly")


@pytest.fixture(autouse=True)
def _reset() -> None:
    Vault.broken = False


def _user(request: object) -> str | None:
    return request.headers.get("x-user")  # type: ignore[attr-defined, no-any-return]


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Runtime:
    runtime = make_runtime()
    runtime.register(Vault)
    runtime.admin.set_policy(allow({"ops:*": "*", "viewer:*": "read"}))
    return runtime


@pytest.fixture
def client(rt: Runtime) -> Iterator[TestClient]:
    with TestClient(dashboard(rt, principal=_user), follow_redirects=False) as c:
        yield c


def as_user(name: str) -> dict[str, str]:
    return {"x-user": name}


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF token on the page"
    return match.group(1)


def dead_letter(rt: Runtime) -> str:
    Vault.broken = True
    sent = rt.ref(Vault, "v1").store.send(item="precious")
    rt.testing.drain()
    Vault.broken = False
    return sent.id


def test_anonymous_gets_401_everywhere(rt: Runtime, client: TestClient) -> None:
    for path in PAGES:
        assert client.get(path).status_code == 401, path
    assert client.post("/dead-letters/retry", data={"one": "x"}).status_code == 401


def test_no_policy_denies_by_default(make_runtime: Callable[..., Runtime]) -> None:
    runtime = make_runtime()
    with TestClient(dashboard(runtime, principal=_user)) as c:
        response = c.get("/", headers=as_user("ops:alice"))
    assert response.status_code == 403
    assert "no administration policy is installed" in response.text


def test_operator_retries_a_dead_letter_after_fixing_the_cause(
    rt: Runtime, client: TestClient
) -> None:
    message_id = dead_letter(rt)
    page = client.get("/dead-letters", headers=as_user("ops:alice"))
    assert page.status_code == 200 and message_id in page.text
    response = client.post(
        "/dead-letters/retry",
        data={"csrf": csrf_of(page.text), "one": message_id, "next": "/dead-letters"},
        headers=as_user("ops:alice"),
    )
    assert response.status_code == 303
    # Back to the list, which then says what the retry did (the retried letters).
    assert response.headers["location"] == f"/dead-letters?retried={message_id}"
    rt.testing.drain()
    assert rt.ref(Vault, "v1").snapshot()["items"] == ["precious"]
    audit = rt.admin.as_principal("ops:alice").audit_log().items
    assert [(a.principal, a.action, a.target_id) for a in audit] == [
        ("ops:alice", "dead_letters.retry", message_id)
    ]
    assert message_id not in client.get("/dead-letters", headers=as_user("ops:alice")).text


def test_read_only_principal_sees_no_controls_and_its_forged_post_is_refused(
    rt: Runtime,
) -> None:
    message_id = dead_letter(rt)
    rt.ref(Vault, "v1").plan.send()
    rt.testing.drain()
    secret = b"k" * 32
    with TestClient(dashboard(rt, principal=_user, secret=secret), follow_redirects=False) as c:
        for path in PAGES:
            html = c.get(path, headers=as_user("viewer:bob")).text
            assert 'method="post"' not in html and "csrf" not in html, path
        assert 'class="control"' in c.get("/dead-letters", headers=as_user("ops:alice")).text
        # Even with a valid CSRF token of its own, the policy refuses bob's writes.
        token = CsrfTokens(secret).issue("viewer:bob")
        for path, data in [
            ("/dead-letters/retry", {"one": message_id}),
            ("/dead-letters/discard", {"ids": message_id}),
            ("/actors/Vault/v1/pause", {}),
            ("/reminders/cancel", {"actor_type": "Vault", "actor_id": "v1",
                                   "operation": "store", "key": "nightly"}),
            ("/effects/retry", {"one": "e1"}),
            ("/processes/recover", {"owner": "p1"}),
        ]:  # fmt: skip
            response = c.post(path, data={**data, "csrf": token}, headers=as_user("viewer:bob"))
            assert response.status_code == 403, path
            assert "viewer:bob may not" in response.text
    assert count_rows(rt, "audit") == 0
    assert count_rows(rt, "reminders") == 1
    open_letters = rt.admin.as_principal("ops:alice").list_dead_letters().items
    assert [d.id for d in open_letters] == [message_id]


def test_csrf_token_is_required_and_bound_to_the_principal(rt: Runtime) -> None:
    message_id = dead_letter(rt)
    app = dashboard(rt, principal=_user, secret=b"k" * 32)
    with TestClient(app, follow_redirects=False) as c:
        alice_page = c.get("/dead-letters", headers=as_user("ops:alice")).text
        carol_page = c.get("/dead-letters", headers=as_user("ops:carol")).text
        # Masked per page: two pages never carry the same token.
        assert csrf_of(alice_page) != csrf_of(
            c.get("/dead-letters", headers=as_user("ops:alice")).text
        )
        refused = [
            {"one": message_id},
            {"one": message_id, "csrf": ""},
            {"one": message_id, "csrf": "not-a-token"},
            {"one": message_id, "csrf": csrf_of(carol_page)},  # carol's, sent as alice
        ]
        for data in refused:
            response = c.post("/dead-letters/retry", data=data, headers=as_user("ops:alice"))
            assert response.status_code == 403, data
            assert "CSRF" in response.text
        assert count_rows(rt, "audit") == 0
        ok = c.post(
            "/dead-letters/retry",
            data={"one": message_id, "csrf": csrf_of(alice_page)},
            headers=as_user("ops:alice"),
        )
        assert ok.status_code == 303
    assert count_rows(rt, "audit") == 1


def test_security_headers_on_every_response(rt: Runtime, client: TestClient) -> None:
    responses = [client.get(p, headers=as_user("ops:alice")) for p in PAGES[:3]]
    responses += [
        client.get("/"),  # 401
        client.get("/actors/Vault/nobody", headers=as_user("ops:alice")),  # 404
        client.get("/static/htmx.min.js"),
    ]
    nonces = set()
    for r in responses:
        csp = r.headers["content-security-policy"]
        for part in ("default-src 'none'", "frame-ancestors 'none'", "base-uri 'none'",
                     "form-action 'self'", "style-src 'self'", "connect-src 'self'"):  # fmt: skip
            assert part in csp, (r.url, part)
        nonce = re.search(r"script-src 'nonce-([\w-]+)'", csp)
        assert nonce, csp
        nonces.add(nonce.group(1))
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["cache-control"] == "no-store"
        if r.headers["content-type"].startswith("text/html"):
            scripts = re.findall(r"<script[^>]*>", r.text)
            assert scripts and all(f'nonce="{nonce.group(1)}"' in s for s in scripts)
    assert len(nonces) == len(responses)  # a fresh nonce per response


def test_stored_script_in_state_and_arguments_renders_as_text(
    rt: Runtime, client: TestClient
) -> None:
    rt.ref(Vault, "v1").store.send(item=XSS)
    rt.testing.drain()
    Vault.broken = True
    rt.ref(Vault, "v1").store.send(item=XSS)
    rt.testing.drain()
    for path in ("/actors/Vault/v1", "/dead-letters"):
        html = client.get(path, headers=as_user("ops:alice")).text
        assert XSS not in html, path
        assert "&lt;script&gt;alert(" in html, path


def test_pause_resume_reminders_and_audit_through_the_policy(
    rt: Runtime, client: TestClient
) -> None:
    rt.ref(Vault, "v1").plan.send()
    rt.testing.drain()
    headers = as_user("ops:alice")
    page = client.get("/actors/Vault/v1", headers=headers).text
    assert "Pause" in page and "Run now" in page
    form = {"csrf": csrf_of(page), "next": "/actors/Vault/v1"}
    r = client.post("/actors/Vault/v1/pause", data=form, headers=headers)
    assert r.status_code == 303
    assert rt.admin.as_principal("ops:x").inspect_actor("Vault", "v1").paused
    page = client.get("/reminders", headers=headers).text
    reminder = {"actor_type": "Vault", "actor_id": "v1", "operation": "store", "key": "nightly"}
    r = client.post("/reminders/pause", data={**reminder, "csrf": csrf_of(page)}, headers=headers)
    assert r.status_code == 303
    assert rt.admin.as_principal("ops:x").list_reminders().items[0].paused
    r = client.post("/reminders/run_now", data={**reminder, "csrf": csrf_of(page)}, headers=headers)
    assert r.status_code == 409 and "resume it first" in r.text
    page = client.get("/actors/Vault/v1", headers=headers).text
    r = client.post("/actors/Vault/v1/resume", data={"csrf": csrf_of(page)}, headers=headers)
    assert r.status_code == 303
    audit = client.get("/audit", headers=headers).text
    for action in ("actors.pause", "reminders.pause", "actors.resume"):
        assert action in audit
    assert "ops:alice" in audit


def test_bad_input_is_a_clear_error_and_writes_nothing(rt: Runtime, client: TestClient) -> None:
    headers = as_user("ops:alice")
    page = client.get("/dead-letters", headers=headers).text
    r = client.post(
        "/dead-letters/retry", data={"csrf": csrf_of(page), "one": "nope"}, headers=headers
    )
    assert r.status_code == 404
    r = client.post("/dead-letters/explode", data={"csrf": csrf_of(page)}, headers=headers)
    assert r.status_code == 404
    assert client.get("/dead-letters?state=weird", headers=headers).status_code == 400
    assert client.get("/actors?type=Vault&cursor=garbage", headers=headers).status_code == 400
    assert count_rows(rt, "audit") == 0


def test_redirect_after_a_change_stays_inside_the_dashboard(
    rt: Runtime, client: TestClient
) -> None:
    message_id = dead_letter(rt)
    page = client.get("/dead-letters", headers=as_user("ops:alice")).text
    r = client.post(
        "/dead-letters/discard",
        data={"csrf": csrf_of(page), "ids": message_id, "next": "//evil.example/"},
        headers=as_user("ops:alice"),
    )
    assert r.status_code == 303 and r.headers["location"] == "/"


def test_mounted_under_a_prefix_links_stay_under_it(rt: Runtime) -> None:
    host = Starlette(routes=[Mount("/ops", app=dashboard(rt, principal=_user))])
    with TestClient(host) as c:
        html = c.get("/ops/", headers=as_user("ops:alice")).text
        assert 'href="/ops/dead-letters"' in html and 'src="/ops/static/htmx.min.js"' in html
        assert c.get("/ops/static/dashboard.css").status_code == 200


def test_lists_page_by_cursor(rt: Runtime, client: TestClient) -> None:
    for i in range(55):
        rt.ref(Vault, f"a{i:03}").store.send(item="x")
    rt.testing.drain()
    first = client.get("/actors?type=Vault", headers=as_user("ops:alice")).text
    assert "a000" in first and "a049" in first and "a050" not in first
    more = re.search(r'href="(\?[^"]*cursor=[^"]+)"', first)
    assert more
    second = client.get("/actors" + more.group(1).replace("&amp;", "&"),
                        headers=as_user("ops:alice")).text  # fmt: skip
    assert "a050" in second and "a054" in second and "a049" not in second


def test_actors_page_searches_by_id_prefix_with_pages(rt: Runtime, client: TestClient) -> None:
    for i in range(52):
        rt.ref(Vault, f"a%{i:03}").store.send(item="x")
    for other in ("a_1", "ab", "b%000"):
        rt.ref(Vault, other).store.send(item="x")
    rt.testing.drain()
    user = as_user("ops:alice")
    first = client.get("/actors?type=Vault&prefix=a%25", headers=user).text
    assert 'value="a%"' in first  # the form keeps the search
    assert "a%000" in first and "a%049" in first and "a%050" not in first
    assert "a_1" not in first and ">ab<" not in first
    more = re.search(r'href="(\?[^"]*cursor=[^"]+)"', first)
    assert more
    second = client.get("/actors" + more.group(1).replace("&amp;", "&"), headers=user).text
    assert "a%050" in second and "a%051" in second and "b%000" not in second
    assert 'href="?' not in second  # the last page of the prefix
    none = client.get("/actors?type=Vault&prefix=zz", headers=user).text
    assert "No actors of this type with an id starting with" in none
    assert client.get("/actors?type=Vault&prefix=a%00", headers=user).status_code == 400


class Courier(Actor):
    sent: int = 0

    def ship(self, to: str) -> None:
        self.sent += 1
        self.emit("deliver", to=to)


def test_dead_effect_is_retried_from_the_effects_page(
    make_runtime: Callable[..., Runtime],
) -> None:
    delivered: list[str] = []
    down = [True]

    def deliver(ctx: object, to: str) -> None:
        if down[0]:
            raise ConnectionError("courier unreachable")
        delivered.append(to)

    runtime = make_runtime(workers=0, effect_max_attempts=1)
    runtime.register(Courier)
    runtime.effect("deliver")(deliver)
    runtime.admin.set_policy(allow({"ops:*": "*", "viewer:*": "read"}))
    runtime.ref(Courier, "c").ship.send(to="<b>home</b>")
    runtime.testing.drain()
    with TestClient(dashboard(runtime, principal=_user), follow_redirects=False) as c:
        assert ">Retry</button>" not in c.get("/effects", headers=as_user("viewer:bob")).text
        page = c.get("/effects", headers=as_user("ops:alice")).text
        assert "courier unreachable" in page and "&lt;b&gt;home&lt;/b&gt;" in page
        (effect,) = runtime.admin.as_principal("ops:x").list_effects().items
        down[0] = False
        r = c.post(
            "/effects/retry",
            data={"csrf": csrf_of(page), "ids": effect.id, "next": "/effects"},
            headers=as_user("ops:alice"),
        )
        assert r.status_code == 303
        runtime.testing.drain()
        assert delivered == ["<b>home</b>"]
        assert "No dead effects." in c.get("/effects", headers=as_user("ops:alice")).text
    (entry,) = runtime.admin.as_principal("ops:x").audit_log().items
    assert (entry.principal, entry.action, entry.target_id) == (
        "ops:alice",
        "effects.retry",
        effect.id,
    )


def test_overview_draws_activity_charts_as_inline_svg(rt: Runtime, client: TestClient) -> None:
    for i in range(3):
        rt.ref(Vault, "v1").store.send(item=f"i{i}")
    rt.testing.drain()
    dead_letter(rt)
    overview = client.get("/", headers=as_user("viewer:bob")).text
    # the overview shows its counts at once and loads the charts after (htmx)
    assert 'hx-get="/activity" hx-trigger="load"' in overview and "<svg" not in overview
    html = client.get("/activity", headers=as_user("viewer:bob")).text
    section = html[html.index('<section id="activity"') :]
    section = section[: section.index("</section>")]
    assert section.count('<svg class="chart"') == 4
    for title in ("Completed", "Latency", "Retried", "Dead letters"):
        assert f"<title>{title}</title>" in section, title
    # bars of the minute(s) they finished in, and a latency line
    assert sum(int(n) for n in re.findall(r"completed: (\d+)</title></rect>", section)) == 3
    assert re.search(r"dead: 1</title></rect>", section)
    assert '<polyline class="series-p50"' in section
    assert "style=" not in section and "<script" not in section  # the CSP allows neither
    assert "retention" in section


def test_actor_page_lists_recent_messages_newest_first_with_pages(
    rt: Runtime, client: TestClient
) -> None:
    for i in range(25):
        rt.ref(Vault, "v1").store.send(item=f"m{i:03}")
    rt.testing.drain()
    Vault.broken = True
    rt.ref(Vault, "v1").store.send(item=XSS)
    rt.testing.drain()
    first = client.get("/actors/Vault/v1", headers=as_user("viewer:bob")).text
    recent = first[first.index('<table id="recent">') :]
    recent = recent[: recent.index("</table>")]
    assert "&lt;script&gt;" in recent and XSS not in recent
    assert "InvalidArguments: the vault is broken" in recent
    assert recent.index("m024") < recent.index("m010") and "m005" not in recent
    more = re.search(r'href="(\?[^"]*cursor=[^"]+)"', first)
    assert more
    second = client.get("/actors/Vault/v1" + more.group(1).replace("&amp;", "&"),
                        headers=as_user("viewer:bob")).text  # fmt: skip
    rest = second[second.index('<table id="recent">') :]
    rest = rest[: rest.index("</table>")]
    assert "m005" in rest and "m000" in rest and "m010" not in rest


class Diary(Actor, auto_register=False):
    journaled = True
    lines: list[str] = []

    def write(self, line: str) -> int:
        self.lines = [*self.lines, line]
        return len(self.lines)


def test_actor_page_shows_a_journaled_actors_state_history(
    rt: Runtime, client: TestClient
) -> None:
    rt.register(Diary)
    for line in ("first", XSS):
        rt.ref(Diary, "d").write.send(line=line)
    rt.testing.drain()
    page = client.get("/actors/Diary/d", headers=as_user("viewer:bob")).text
    journal = page[page.index('<table id="journal">') :]
    journal = journal[: journal.index("</table>")]
    assert journal.index("&lt;script&gt;") < journal.index("&#34;first&#34;")  # newest first
    assert XSS not in journal
    rt.ref(Vault, "v1").store.send(item="x")
    rt.testing.drain()
    plain = client.get("/actors/Vault/v1", headers=as_user("viewer:bob"))
    assert plain.status_code == 200
    assert 'id="journal"' not in plain.text  # a class without a journal shows none


#: Lets the turns of ``OneAtATime`` finish.
_RELEASE = threading.Event()


class OneAtATime(Actor, auto_register=False):
    """One turn at a time over every process; each turn waits for ``_RELEASE``."""

    max_active_turns = 1

    def hold(self) -> str:
        _RELEASE.wait(30)
        return self.actor_id


def test_the_effects_page_shows_each_type_turn_limit_and_who_waits_for_it(
    make_runtime: Callable[..., Runtime],
) -> None:
    """Three actors of a type limited to one turn, with four worker threads: the
    Effects page shows the limit, one turn running and two actors waiting, counted
    from the database's rows; a principal without ``status`` sees the page without it."""
    _RELEASE.clear()
    runtime = make_runtime(actors=[OneAtATime], workers=4)
    runtime.admin.set_policy(allow({"ops:*": "read", "effects:*": ["effects.list"]}))
    ops = runtime.admin.as_principal("ops:ann")
    with runtime, TestClient(dashboard(runtime, principal=_user)) as c:
        sent = [runtime.ref(OneAtATime, f"h{i}").hold.send() for i in range(3)]
        try:
            deadline = time.monotonic() + 20
            while [(t.running, t.waiting) for t in ops.turn_limits()] != [(1, 2)]:
                assert time.monotonic() < deadline, ops.turn_limits()
                time.sleep(0.02)
            page = c.get("/effects", headers=as_user("ops:ann")).text
            narrow = c.get("/effects", headers=as_user("effects:bob"))
        finally:
            _RELEASE.set()
        assert [s.wait(timeout=30) for s in sent] == ["h0", "h1", "h2"]
    assert "Turn limits" in page
    assert (
        '<td><a href="/actors?type=OneAtATime">OneAtATime</a></td>'
        "<td>1</td><td>1</td><td><strong>2</strong></td>"
    ) in page
    assert narrow.status_code == 200 and "Turn limits" not in narrow.text
