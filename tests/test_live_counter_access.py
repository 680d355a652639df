"""The live counter example refuses its ``private-`` counters on every path, as it
says: the realtime socket (tests/test_realtime_browser.py) and the three HTTP routes,
which ask the same policies and write nothing when refused. On every backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from examples.live_counter import build
from solid_objects import Runtime

from .conftest import count_rows


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    with TestClient(build(db_url)) as test_client:
        yield test_client


def test_private_counters_are_refused_over_http_and_nothing_is_written(
    client: TestClient, db_url: str
) -> None:
    for user in ("guest", "alice"):
        query = {"counter": "private-x", "user": user}
        assert client.get("/fragment", params=query).status_code == 403
        assert client.post("/increment", params=query).status_code == 403
        assert client.post("/reset", params=query).status_code == 403
    reader = Runtime(db_url, workers=0)
    try:
        assert count_rows(reader, "actors", "actor_id = 'private-x'") == 0
        assert count_rows(reader, "messages", "actor_id = 'private-x'") == 0
    finally:
        reader.close()


def test_public_counters_work_over_http(client: TestClient) -> None:
    query = {"counter": "shared", "user": "alice"}
    assert client.post("/increment", params=query).json() == {"value": 1}
    assert client.post("/increment", params=query).json() == {"value": 2}
    assert 'id="fragment-value">2<' in client.get("/fragment", params=query).text
    assert client.post("/reset", params=query).status_code == 204
    assert client.post("/increment", params=query).json() == {"value": 1}
