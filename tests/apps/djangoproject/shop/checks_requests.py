"""Views' refs, Idempotency-Key and a clean library per test, under ``manage.py test``.

Run by tests/test_contrib_django.py as ``manage.py test shop.checks_requests`` (the
name keeps Django's discovery of ``test*.py`` from running it with the other tests).
"""

from django.test import override_settings
from sqlalchemy import text

from solid_objects.authorization import AuthorizationRequest
from solid_objects.contrib.django import close, runtime, settings
from solid_objects.contrib.django.testing import TransactionTestCase

from .models import Order


def stored(table: str) -> int:
    with runtime().engine.connect() as db:
        return int(db.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def own_tally(request: AuthorizationRequest) -> bool:
    return request.actor_id == f"tally-{request.context}"


def configured(**changes: object) -> override_settings:
    """SOLID_OBJECTS with ``changes``; the runtime is rebuilt with them on next use."""
    close()
    return override_settings(SOLID_OBJECTS={**settings(), **changes})


class RequestRefs(TransactionTestCase):
    def tearDown(self) -> None:
        close()  # the next test's runtime is built with its own settings

    def test_a_view_ref_without_a_policy_is_refused_and_writes_nothing(self) -> None:
        with configured(ALLOW_ALL_CALLERS=False):
            refused = self.client.post("/tallies/t1/add", {"n": 2})
            assert refused.status_code == 403, refused.content
            assert refused.json()["code"] == "Unauthorized"
            assert "ALLOW_ALL_CALLERS" in refused.json()["detail"]
            assert stored("solid_messages") == 0 and stored("solid_actors") == 0

    def test_a_view_ref_passes_with_the_opt_in(self) -> None:
        with configured(ALLOW_ALL_CALLERS=True):
            assert self.client.post("/tallies/t1/add", {"n": 2}).json() == {"total": 2}

    def test_a_view_ref_passes_where_a_policy_allows(self) -> None:
        options = {**settings()["OPTIONS"], "authorize_message": own_tally}
        with configured(ALLOW_ALL_CALLERS=False, OPTIONS=options):
            ann = {"x-user": "ann"}
            assert self.client.post("/tallies/tally-ann/add", {"n": 2}, headers=ann).json() == {
                "total": 2
            }
            other = self.client.post("/tallies/tally-bo/add", {"n": 2}, headers=ann)
            assert other.status_code == 403


class IdempotencyKeyHeader(TransactionTestCase):
    def test_a_retried_request_with_the_same_key_applies_once(self) -> None:
        key = {"Idempotency-Key": '"order-7"'}
        for _ in range(3):
            placed = self.client.post("/orders/o1", {"sku": "tea"}, headers=key)
            assert placed.json() == {"placed": 1}, placed.content
        assert list(Order.objects.values_list("sku", flat=True)) == ["tea"]  # one row
        other = self.client.post("/orders/o1", {"sku": "cake"}, headers=key)
        assert other.status_code == 422 and other.json()["code"] == "IdempotencyConflict"
        missing = self.client.post("/orders/o1", {"sku": "tea"})
        assert missing.status_code == 400 and missing.json()["code"] == "InvalidIdempotencyKey"
        assert Order.objects.count() == 1 and stored("solid_messages") == 1


class EachTestStartsWithAnEmptyLibrary(TransactionTestCase):
    """Both expect a first add on the same tally: the second passes only after a reset."""

    def test_first(self) -> None:
        assert self.client.post("/tallies/same/add", {"n": 1}).json() == {"total": 1}

    def test_second(self) -> None:
        assert self.client.post("/tallies/same/add", {"n": 1}).json() == {"total": 1}
