"""pytest-django runs these: the runtime is on pytest-django's test database."""

import pytest
from django.db import connection, transaction
from shop.actors import DjangoTally
from shop.models import Order
from sqlalchemy import text

from solid_objects.contrib.django import close, ref, runtime


def messages() -> int:
    with runtime().engine.connect() as db:
        return int(db.execute(text("SELECT count(*) FROM solid_messages")).scalar_one())


def test_without_the_django_db_mark_the_runtime_is_refused_too() -> None:
    # pytest-django runs the tests without the mark last: close the runtime the tests
    # above built, so this one builds it, where database access is blocked (before any
    # django_db test, pytest-django has not even created the test database).
    close()
    with pytest.raises(RuntimeError, match="Database access not allowed"):
        runtime()


@pytest.mark.django_db(transaction=True)
def test_the_runtime_is_on_the_test_database() -> None:
    name = str(connection.settings_dict["NAME"])
    assert name.endswith(("test.sqlite3", "_test")), name  # pytest-django's test database
    assert str(runtime().engine.url.database) == name
    assert ref(DjangoTally, "pytest").add(n=4) == 4
    assert messages() == 1


@pytest.mark.django_db(transaction=True)
def test_the_outbox_rolls_back_with_the_test_transaction() -> None:
    tally = ref(DjangoTally, "pytest-outbox")
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        Order.objects.create(sku="tea")
        tally.add.with_options(connection=connection).send(n=1)
        raise ZeroDivisionError
    with transaction.atomic():
        sent = tally.add.with_options(connection=connection).send(n=2)
    assert sent.wait(timeout=60) == 2
    assert Order.objects.count() == 0
