"""The realtime WebSocket endpoint over Starlette's TestClient, on every backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from solid_objects import Actor, AuthorizationRequest, Runtime, payload
from solid_objects.web import realtime
from solid_objects.web.realtime import CLOSE_UNSUPPORTED


class LiveBoard(Actor):
    score: int = 0
    title: str = ""
    notes: dict[str, str] = {}

    observables = {"score": "value", "title": "invalidate"}

    def add(self, n: int = 1) -> int:
        self.score += n
        return self.score

    def rename(self, title: str) -> None:
        self.title = title

    def note(self, who: str, text: str) -> None:
        self.notes = {**self.notes, who: text}

    @payload
    def mine(self, context: Any) -> dict[str, str]:
        return {"note": self.notes.get(str(context), "")}


class HiddenLedger(Actor):
    """Declares no observables: not subscribable."""

    total: int = 0

    def add(self) -> None:
        self.total += 1


def subscriptions(request: AuthorizationRequest) -> bool:
    return request.context in ("alice", "bob") and not request.actor_id.startswith("private")


@pytest.fixture
def rt(make_runtime: Callable[..., Runtime]) -> Iterator[Runtime]:
    runtime = make_runtime(authorize_subscription=subscriptions)
    with runtime:
        yield runtime


def app_of(runtime: Runtime, **options: Any) -> Any:
    return realtime(runtime, context=lambda ws: ws.headers.get("x-user"), **options)


def connect(client: TestClient, user: str | None = "alice") -> Any:
    headers = {} if user is None else {"x-user": user}
    ws = client.websocket_connect("/ws", headers=headers)
    return ws


def subscribe(ws: Any, ref: str, actor_id: str, **extra: Any) -> None:
    ws.send_json(
        {
            "v": 1,
            "type": "subscribe",
            "id": ref,
            "actor_type": extra.pop("actor_type", "LiveBoard"),
            "actor_id": actor_id,
            **extra,
        }
    )


def test_snapshot_then_committed_changes_in_revision_order(rt: Runtime) -> None:
    board = rt.ref(LiveBoard, "b1")
    board.add(n=2)
    with TestClient(app_of(rt)) as client, connect(client) as ws:
        assert ws.receive_json() == {"v": 1, "type": "welcome", "protocol": 1}
        subscribe(ws, "s", "b1")
        snapshot = ws.receive_json()
        assert snapshot["type"] == "snapshot" and snapshot["exists"] is True
        assert snapshot["values"] == {"score": 2} and snapshot["invalidated"] == ["title"]
        assert "notes" not in str(snapshot)
        for _ in range(3):
            board.add(n=1)
        board.rename(title="t")
        frames = [ws.receive_json() for _ in range(4)]
    assert [f["values"] for f in frames] == [{"score": 3}, {"score": 4}, {"score": 5}, {}]
    assert frames[-1]["invalidated"] == ["title"]
    revisions = [(f["incarnation"], f["revision"]) for f in frames]
    assert revisions == sorted(revisions) and len(set(revisions)) == 4
    assert revisions[0] > (snapshot["incarnation"], snapshot["revision"])


def test_a_missing_actor_is_a_snapshot_of_its_defaults(rt: Runtime) -> None:
    with TestClient(app_of(rt)) as client, connect(client) as ws:
        ws.receive_json()
        subscribe(ws, "s", "nobody-yet")
        snapshot = ws.receive_json()
        assert snapshot["exists"] is False and snapshot["values"] == {"score": 0}
        assert (snapshot["incarnation"], snapshot["revision"]) == (0, 0)
        rt.ref(LiveBoard, "nobody-yet").add(n=7)
        resync = ws.receive_json()  # a new incarnation: a snapshot, not a change
    assert resync["type"] == "snapshot" and resync["values"] == {"score": 7}
    assert resync["exists"] is True and resync["incarnation"] > 0


def test_forbidden_and_missing_look_the_same(rt: Runtime) -> None:
    rt.ref(LiveBoard, "private-existing").add(n=1)
    with TestClient(app_of(rt)) as client:
        answers = []
        for user, actor_id in [
            ("alice", "private-existing"),
            ("alice", "private-missing"),
            ("mallory", "b-existing"),
            (None, "b-missing"),
        ]:
            rt.ref(LiveBoard, "b-existing").add(n=1)
            with connect(client, user) as ws:
                ws.receive_json()
                subscribe(ws, "s", actor_id)
                answers.append(ws.receive_json())
    assert all(a == answers[0] for a in answers), answers
    assert answers[0]["code"] == "unauthorized"


def test_the_policy_runs_before_the_actor_type_is_looked_up(rt: Runtime) -> None:
    with TestClient(app_of(rt)) as client, connect(client, "mallory") as ws:
        ws.receive_json()
        subscribe(ws, "s", "x", actor_type="NoSuchType")
        assert ws.receive_json()["code"] == "unauthorized"
    with TestClient(app_of(rt)) as client, connect(client) as ws:
        ws.receive_json()
        subscribe(ws, "a", "x", actor_type="NoSuchType")
        assert ws.receive_json()["code"] == "unknown_actor_type"
        subscribe(ws, "b", "x", actor_type="HiddenLedger")
        assert ws.receive_json()["code"] == "not_observable"
        subscribe(ws, "c", "x", payloads=["theirs"])
        assert ws.receive_json()["code"] == "unknown_payload"


def test_personalized_payloads_never_leak(make_runtime: Callable[..., Runtime]) -> None:
    asked: list[tuple[Any, str | None]] = []

    def query_policy(request: AuthorizationRequest) -> bool:
        asked.append((request.context, request.operation))
        return request.context != "carol"

    rt = make_runtime(
        authorize_subscription=lambda r: r.context in ("alice", "bob", "carol"),
        authorize_query=query_policy,
    )
    with rt, TestClient(app_of(rt)) as client:
        board = rt.ref(LiveBoard, "notes")
        board.note(who="alice", text="alice-secret")
        seen: dict[str, list[Any]] = {}
        sockets = {user: connect(client, user).__enter__() for user in ("alice", "bob", "carol")}
        try:
            for user, ws in sockets.items():
                ws.receive_json()
                subscribe(ws, "s", "notes", payloads=["mine"])
                seen[user] = [ws.receive_json()]  # snapshot
                if user != "carol":
                    seen[user].append(ws.receive_json())  # payload
            board.note(who="bob", text="bob-secret")
            for user in ("alice", "bob"):
                seen[user].append(sockets[user].receive_json())
            board.add(n=1)  # carol's next frame is this change: she got no payload
            seen["carol"].append(sockets["carol"].receive_json())
        finally:
            for ws in sockets.values():
                ws.__exit__(None, None, None)
    alice, bob, carol = seen["alice"], seen["bob"], seen["carol"]
    assert alice[1]["payload"] == {"note": "alice-secret"}
    assert bob[1]["payload"] == {"note": ""} and bob[2]["payload"] == {"note": "bob-secret"}
    assert "bob-secret" not in str(alice) and "alice-secret" not in str(bob)
    assert alice[2]["payload"] == {"note": "alice-secret"}  # recomputed, still hers
    assert [f["type"] for f in carol] == ["snapshot", "change"]
    assert "secret" not in str(carol)
    assert ("carol", "mine") in asked


def test_destroyed_then_recreated_never_rolls_back(rt: Runtime) -> None:
    board = rt.ref(LiveBoard, "phoenix")
    board.add(n=5)
    with TestClient(app_of(rt)) as client, connect(client) as ws:
        ws.receive_json()
        subscribe(ws, "s", "phoenix")
        first = ws.receive_json()
        board.destroy()
        destroyed = ws.receive_json()
        board.add(n=1)
        reborn = ws.receive_json()
    assert destroyed["type"] == "destroyed"
    assert (first["incarnation"], first["revision"]) < (
        destroyed["incarnation"],
        destroyed["revision"],
    )
    assert reborn["type"] == "snapshot" and reborn["values"] == {"score": 1}
    assert reborn["incarnation"] > destroyed["incarnation"]


def test_unsupported_protocol_version_closes(rt: Runtime) -> None:
    with TestClient(app_of(rt)) as client, connect(client) as ws:
        ws.receive_json()
        ws.send_json({"v": 2, "type": "subscribe", "id": "s"})
        assert ws.receive_json()["code"] == "unsupported_version"
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
    assert closed.value.code == CLOSE_UNSUPPORTED


def test_malformed_frames_are_answered_and_the_connection_stays(rt: Runtime) -> None:
    with TestClient(app_of(rt)) as client, connect(client) as ws:
        ws.receive_json()
        ws.send_text("not json")
        assert ws.receive_json()["code"] == "malformed"
        subscribe(ws, "s", "bad id with spaces\x00")
        assert ws.receive_json()["code"] == "malformed"
        subscribe(ws, "s", "ok")
        assert ws.receive_json()["type"] == "snapshot"
        ws.send_json({"v": 1, "type": "unsubscribe", "id": "s"})
        rt.ref(LiveBoard, "ok").add(n=1)
        subscribe(ws, "t", "ok")  # the next frame is t's snapshot, nothing for s
        frame = ws.receive_json()
    assert frame["id"] == "t" and frame["type"] == "snapshot"


def test_another_origin_is_refused(rt: Runtime) -> None:
    with TestClient(app_of(rt)) as client:
        with pytest.raises(WebSocketDisconnect):
            with client.websocket_connect(
                "/ws", headers={"x-user": "alice", "origin": "https://evil.example"}
            ) as ws:
                ws.receive_json()
        with client.websocket_connect(
            "/ws", headers={"x-user": "alice", "origin": "http://testserver"}
        ) as ws:
            assert ws.receive_json()["type"] == "welcome"


def test_changes_committed_by_another_process_arrive(
    make_runtime: Callable[..., Runtime],
) -> None:
    """The endpoint's runtime runs no workers: PostgreSQL NOTIFY, or polling elsewhere."""
    workers = make_runtime(authorize_subscription=subscriptions)
    web = make_runtime(workers=0, authorize_subscription=subscriptions)
    with workers, web, TestClient(app_of(web, poll_interval=0.2)) as client:
        with connect(client) as ws:
            ws.receive_json()
            subscribe(ws, "s", "remote")
            assert ws.receive_json()["type"] == "snapshot"
            board = workers.ref(LiveBoard, "remote")
            board.add(n=1)
            first = ws.receive_json()  # a new incarnation: a snapshot
            board.add(n=1)
            board.add(n=1)
            rest = [ws.receive_json(), ws.receive_json()]
    assert first["values"] == {"score": 1}
    assert [f["values"] for f in rest] == [{"score": 2}, {"score": 3}]


def test_the_client_module_and_its_types_are_served(rt: Runtime) -> None:
    with TestClient(app_of(rt)) as client:
        js = client.get("/client.js")
        dts = client.get("/client.d.ts")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"]
    assert "export class RealtimeClient" in js.text
    assert dts.status_code == 200 and "export declare class RealtimeClient" in dts.text


def test_hints_deliver_without_polling(
    make_runtime: Callable[..., Runtime], backend: str, tmp_path: Any
) -> None:
    """With polling out of the picture (an hour's interval), another process's commits
    arrive through the runtime's wake-up listener: NOTIFY on PostgreSQL, Redis elsewhere."""
    from .test_redis_wakeup import RedisServer

    redis = None
    options: dict[str, Any] = {"authorize_subscription": subscriptions}
    if backend != "postgresql":
        redis = RedisServer(tmp_path)
        redis.start()
        options["wakeup_url"] = redis.url
    try:
        workers = make_runtime(**options)
        web = make_runtime(workers=0, **options)
        with workers, web, TestClient(app_of(web, poll_interval=3600)) as client:
            assert web.kernel.listener is not None and web.kernel.listener.listening.wait(30)
            with connect(client) as ws:
                ws.receive_json()
                subscribe(ws, "s", "hinted")
                assert ws.receive_json()["type"] == "snapshot"
                board = workers.ref(LiveBoard, "hinted")
                board.add(n=1)
                first = ws.receive_json()
                board.add(n=2)
                second = ws.receive_json()
    finally:
        if redis is not None:
            redis.stop()
    assert first["values"] == {"score": 1} and second["values"] == {"score": 3}


def test_subscriptions_are_denied_without_a_policy(make_runtime: Callable[..., Runtime]) -> None:
    rt = make_runtime()
    with rt, TestClient(app_of(rt)) as client, connect(client) as ws:
        ws.receive_json()
        subscribe(ws, "s", "b1")
        assert ws.receive_json()["code"] == "unauthorized"


class FlakyPayloads(Actor):
    n: int = 0

    observables = {"n": "value"}

    def bump(self) -> None:
        self.n += 1

    @payload
    def broken(self, context: Any) -> dict[str, int]:
        raise ValueError("a bug in the application's payload")

    @payload
    def fine(self, context: Any) -> dict[str, int]:
        return {"n": self.n}


def test_a_failing_payload_is_reported_and_spares_the_others(rt: Runtime) -> None:
    rt.ref(FlakyPayloads, "f").bump()
    with TestClient(app_of(rt)) as client, connect(client) as ws:
        ws.receive_json()
        subscribe(ws, "s", "f", actor_type="FlakyPayloads", payloads=["broken", "fine"])
        frames = [ws.receive_json() for _ in range(3)]
        rt.ref(FlakyPayloads, "f").bump()
        later = [ws.receive_json() for _ in range(3)]
    assert [f["type"] for f in frames] == ["snapshot", "error", "payload"]
    assert frames[1]["code"] == "payload_failed" and "ValueError" in frames[1]["message"]
    assert "a bug" not in frames[1]["message"]  # the exception's text stays on the server
    assert frames[2]["payload"] == {"n": 1}
    by_type = {f["type"]: f for f in later}
    assert by_type["payload"]["payload"] == {"n": 2} and by_type["change"]["values"] == {"n": 2}


def test_the_async_runtime_with_async_context_and_policy(db_url: str) -> None:
    import asyncio

    from solid_objects import AsyncRuntime

    async def may(request: AuthorizationRequest) -> bool:
        await asyncio.sleep(0)
        return request.context == "alice"

    async def who(websocket: Any) -> str | None:
        return websocket.headers.get("x-user")  # type: ignore[no-any-return]

    rt = AsyncRuntime(db_url, authorize_subscription=may, poll_interval=0.05)

    async def setup() -> None:
        await rt.install()

    asyncio.run(setup())
    app = realtime(rt, context=who)
    try:
        with TestClient(app) as client:
            with connect(client, "alice") as ws:
                ws.receive_json()
                subscribe(ws, "s", "async-board")
                assert ws.receive_json()["type"] == "snapshot"
            with connect(client, "bob") as ws:
                ws.receive_json()
                subscribe(ws, "s", "async-board")
                assert ws.receive_json()["code"] == "unauthorized"
    finally:
        asyncio.run(rt.close())


def test_an_operator_destroy_reaches_subscribers(rt: Runtime) -> None:
    from solid_objects.admin import allow

    rt.admin.set_policy(allow({"ops:*": "*"}))
    rt.ref(LiveBoard, "ops-destroyed").add(n=1)
    with TestClient(app_of(rt)) as client, connect(client) as ws:
        ws.receive_json()
        subscribe(ws, "s", "ops-destroyed")
        snapshot = ws.receive_json()
        assert rt.admin.as_principal("ops:alice").destroy_actor("LiveBoard", "ops-destroyed")
        destroyed = ws.receive_json()
    assert destroyed["type"] == "destroyed"
    assert destroyed["incarnation"] == snapshot["incarnation"]
    assert destroyed["revision"] > snapshot["revision"]


def test_a_frame_nested_too_deep_is_answered_and_the_connection_stays(rt: Runtime) -> None:
    with TestClient(app_of(rt)) as client, connect(client) as ws:
        ws.receive_json()
        ws.send_text("[" * 8000 + "]" * 8000)
        assert ws.receive_json()["code"] == "malformed"
        subscribe(ws, "s", "ok")
        assert ws.receive_json()["type"] == "snapshot"


def test_with_allowed_origins_only_those_pass_a_rebinding_page_does_not(
    rt: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    rebinding = {
        "x-user": "alice",
        "origin": "http://evil.example:8000",
        "host": "evil.example:8000",
    }
    # Without the list a page naming the Host it reached passes: what DNS rebinding does.
    with caplog.at_level("WARNING", logger="solid_objects.realtime"):
        open_app = app_of(rt)
    assert "allowed_origins is not set" in caplog.text
    with TestClient(open_app) as client, client.websocket_connect("/ws", headers=rebinding) as ws:
        assert ws.receive_json()["type"] == "welcome"
    strict = app_of(rt, allowed_origins=["https://shop.example"])
    with TestClient(strict) as client:
        with pytest.raises(WebSocketDisconnect):
            with client.websocket_connect("/ws", headers=rebinding) as ws:
                ws.receive_json()
        allowed = {"x-user": "alice", "origin": "https://shop.example"}
        with client.websocket_connect("/ws", headers=allowed) as ws:
            assert ws.receive_json()["type"] == "welcome"
