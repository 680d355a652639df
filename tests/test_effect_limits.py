"""Flow control of effects: a rate and a concurrency limit per effect name hold over
several real worker processes on SQLite, PostgreSQL and MariaDB.

The observations come from the database's own rows, not from any process's counters:
each attempt's claim time (``effects.started_at``, the database clock in the claiming
statement) and its recorded finish (``effects.completed_at``). The control test runs
the same workload without limits and sees the measurement exceed them, so a limit that
stopped holding would show.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from solid_objects import Actor, Rate, Runtime
from solid_objects.errors import ConfigurationError, Unauthorized
from tests.apps.limitapp import LimitedOutbox

from .test_processes import STEP, Cluster, wait_until

pytestmark = pytest.mark.slow

OPTIONS: dict[str, Any] = {"workers": 1, "effect_workers": 4, "poll_interval": 0.2}


@pytest.fixture
def cluster(tmp_path: Path, db_url: str, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(tmp_path, db_url)
    request.addfinalizer(c.close)
    yield c


def run_batch(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, limits: dict[str, Any], count: int
) -> list[tuple[int, int]]:
    """Three worker processes run ``count`` effects; their (claimed, finished) times."""
    monkeypatch.setenv("SOLID_TEST_LIMITS", json.dumps(limits))
    rt = cluster.caller(actors=[LimitedOutbox])
    cluster.start_workers(3, "tests.apps.limitapp:runtime", **OPTIONS)
    rt.ref(LimitedOutbox, "batch").queue(n=count)

    def finished() -> list[tuple[int, int]]:
        with rt.store.read() as tx:
            rows = tx.rows(
                "SELECT started_at, completed_at FROM solid_effects WHERE status = 'done'"
            )
        return [(int(s), int(c)) for s, c in rows] if len(rows) == count else []

    spans = wait_until(finished, STEP * 3, f"{count} effects to finish")
    with rt.store.read() as tx:
        assert tx.scalar("SELECT MAX(attempts) FROM solid_effects") == 1
    return spans


def most_in_window(starts: list[int], window_ms: int) -> int:
    """The most starts in any half-open window ``[t, t + window_ms)``."""
    ordered = sorted(starts)
    best = 0
    for i, t in enumerate(ordered):
        best = max(best, sum(1 for u in ordered[i:] if u < t + window_ms))
    return best


def most_at_once(spans: list[tuple[int, int]]) -> int:
    """The most attempts whose [claimed, finished) intervals overlap."""
    events = sorted([(s, 1) for s, _ in spans] + [(c, -1) for _, c in spans])
    # At an equal time a finish comes first: the next claim committed after it.
    events.sort(key=lambda e: (e[0], e[1]))
    best = current = 0
    for _, step in events:
        current += step
        best = max(best, current)
    return best


def test_a_rate_limit_holds_over_three_worker_processes(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    spans = run_batch(cluster, monkeypatch, {"rate": [5, 1.0]}, 20)
    starts = [s for s, _ in spans]
    assert most_in_window(starts, 1000) <= 5, [s - min(starts) for s in sorted(starts)]
    # 20 starts at 5 per second cannot take less than three full windows.
    assert max(starts) - min(starts) >= 3000


def test_a_concurrency_limit_holds_over_three_worker_processes(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    spans = run_batch(cluster, monkeypatch, {"max_concurrent": 2, "hold": 0.2}, 16)
    assert most_at_once(spans) <= 2, sorted(spans)


def test_without_limits_the_same_measurements_exceed_them(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: twelve handler slots over three processes, no limit declared."""
    spans = run_batch(cluster, monkeypatch, {"hold": 0.3}, 16)
    assert most_at_once(spans) > 2
    assert most_in_window([s for s, _ in spans], 1000) > 5


class EffectLimitProbe(Actor):
    sent: int = 0

    def burst(self, n: int) -> None:
        for i in range(n):
            self.emit("probe_send", i=i)
        self.sent += n


@pytest.fixture
def limited(db_url: str) -> Iterator[Callable[..., Runtime]]:
    made: list[Runtime] = []

    def make(**limits: Any) -> Runtime:
        rt = Runtime(db_url, workers=0, actors=[EffectLimitProbe], poll_interval=0.05)
        rt.install()
        rt.effect("probe_send", **limits)(lambda ctx, i: i)
        made.append(rt)
        return rt

    yield make
    for rt in made:
        rt.close()


def effect_statuses(rt: Runtime) -> list[str]:
    with rt.store.read() as tx:
        return sorted(str(s) for (s,) in tx.rows("SELECT status FROM solid_effects"))


def test_the_status_names_the_limit_that_holds_effects_back(
    limited: Callable[..., Runtime],
) -> None:
    rt = limited(rate=Rate(1, per=60.0))
    rt.ref(EffectLimitProbe, "a").burst.send(n=3)
    rt.testing.drain()
    assert effect_statuses(rt) == ["done", "pending", "pending"]
    with rt.store.read() as tx:
        (status,) = rt.store.effect_limits.effect_limit_status(tx)
    assert (status.name, status.waiting_on, status.due, status.recent_starts) == (
        "probe_send",
        "rate",
        2,
        1,
    )
    assert rt.kernel.pool.effects.held_back == {"probe_send": "rate"}


def test_doctor_the_admin_api_the_dashboard_and_the_metrics_show_the_waiting(
    limited: Callable[..., Runtime],
) -> None:
    import prometheus_client  # the dev extra

    from solid_objects.admin import allow
    from solid_objects.observability import PrometheusMetrics, observe
    from solid_objects.web import dashboard

    with warnings.catch_warnings():  # Starlette 1.x prefers httpx2; httpx works the same
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    rt = limited(rate=Rate(2, per=60.0), max_concurrent=5)
    registry = prometheus_client.CollectorRegistry()
    observe(rt, PrometheusMetrics(registry))
    rt.ref(EffectLimitProbe, "e").burst.send(n=5)
    rt.testing.drain()
    check = next(c for c in rt.doctor(round_trip=False).checks if c.name == "effect limits")
    assert check.detail == (
        "probe_send (rate 2/60s, at most 5 at once): 0 running, 3 due, waiting on its rate limit"
    )
    sample = {"effect": "probe_send", "limit": "rate"}
    assert registry.get_sample_value("solid_effects_held_back", sample) == 3
    rt.admin.set_policy(allow({"ops:*": "read"}))
    with pytest.raises(Unauthorized):
        rt.admin.effect_limits()
    (info,) = rt.admin.as_principal("ops:ann").effect_limits()
    assert (info.rate_count, info.rate_per_seconds, info.due, info.waiting_on) == (
        2,
        60.0,
        3,
        "rate",
    )
    with TestClient(dashboard(rt, principal=lambda request: "ops:ann")) as client:
        page = client.get("/effects").text
    assert "Flow control" in page and "<strong>rate limit</strong>" in page


def test_an_expired_claim_stops_counting_against_the_concurrency_limit(
    limited: Callable[..., Runtime],
) -> None:
    """A crashed process's claim holds its slot only until it expires."""
    rt = limited(max_concurrent=1)
    rt.ref(EffectLimitProbe, "b").burst.send(n=2)
    with rt.testing.capture_effects():
        rt.testing.drain()  # the turn only: its effects wait

    def crashed_claim(tx: Any) -> bool:
        effect = rt.store.outbox.due_effects(tx, ["probe_send"], 10)[0]
        return rt.store.outbox.claim_effect(tx, effect, "crashed-owner", 60_000)

    assert rt.store.transact(crashed_claim)
    rt.testing.drain()
    assert effect_statuses(rt) == ["pending", "running"]
    with rt.store.read() as tx:
        (status,) = rt.store.effect_limits.effect_limit_status(tx)
    assert (status.waiting_on, status.running, status.due) == ("concurrency", 1, 1)
    rt.store.transact(
        lambda tx: tx.run(
            "UPDATE solid_effects SET available_at = {now} WHERE claimed_by = 'crashed-owner'"
        )
    )
    time.sleep(0.1)  # the runner rechecks a concurrency wait every poll_interval

    def all_done() -> bool:
        rt.testing.drain()
        return effect_statuses(rt) == ["done", "done"]

    wait_until(all_done, STEP, "both effects to run once the crashed claim expired")


def test_limits_still_hold_after_a_testing_reset(db_url: str) -> None:
    """``runtime.testing.reset()`` deletes the limits' rows too: they are put back."""
    rt = Runtime(db_url, workers=0, actors=[EffectLimitProbe], allow_reset=True)
    try:
        rt.install()
        rt.effect("probe_send", rate=Rate(1, per=60.0))(lambda ctx, i: i)
        rt.ref(EffectLimitProbe, "r").burst.send(n=2)
        rt.testing.drain()
        rt.testing.reset()
        rt.ref(EffectLimitProbe, "r").burst.send(n=2)
        rt.testing.drain()
        assert effect_statuses(rt) == ["done", "pending"]
    finally:
        rt.close()


def test_bad_limits_are_refused_before_anything_runs(limited: Callable[..., Runtime]) -> None:
    with pytest.raises(ConfigurationError):
        Rate(0)
    with pytest.raises(ConfigurationError):
        Rate(3, per=0)
    rt = limited()
    with pytest.raises(ConfigurationError):
        rt.effect("other", max_concurrent=0)
    with pytest.raises(ConfigurationError):
        rt.effect("other", rate=10)  # type: ignore[arg-type]

