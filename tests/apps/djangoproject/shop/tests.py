"""The Django tests ``manage.py test`` runs in tests/test_contrib_django.py."""

import contextlib

from django.db import connection, transaction
from django.test import TestCase, TransactionTestCase
from sqlalchemy import text

from solid_objects.contrib.django import ref, runtime, send_on_commit

from .actors import DjangoTally
from .models import Order


def queued(actor_id: str) -> int:
    """Messages stored for the tally ``actor_id``, read through the runtime's engine."""
    with runtime().engine.connect() as db:
        return int(
            db.execute(
                text("SELECT count(*) FROM solid_messages WHERE actor_id = :id"), {"id": actor_id}
            ).scalar_one()
        )


class Boom(Exception):
    pass


class RuntimeOnTheTestDatabase(TestCase):
    def test_a_call_runs_on_the_test_database(self) -> None:
        assert str(runtime().engine.url.database) == str(connection.settings_dict["NAME"])
        assert ref(DjangoTally, "in-test").add(n=2) == 2
        assert queued("in-test") == 1


class SendOnCommit(TransactionTestCase):
    def test_a_rolled_back_atomic_sends_nothing(self) -> None:
        tally = ref(DjangoTally, "rolled-back")
        with contextlib.suppress(Boom), transaction.atomic():
            Order.objects.create(sku="tea")
            send_on_commit(tally.add, n=1)
            raise Boom
        assert Order.objects.count() == 0
        assert queued("rolled-back") == 0
        assert tally.add(n=0) == 0

    def test_a_committed_atomic_sends_once_after_the_commit(self) -> None:
        tally = ref(DjangoTally, "committed")
        with transaction.atomic():
            Order.objects.create(sku="tea")
            send_on_commit(tally.add, n=5)
            assert queued("committed") == 0
        assert Order.objects.count() == 1
        assert queued("committed") == 1
        assert tally.add(n=0) == 5
