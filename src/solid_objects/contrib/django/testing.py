"""Tests of a Django project: a runner that closes the runtime, a clean library per test.

``TEST_RUNNER = "solid_objects.contrib.django.testing.DiscoverRunner"``: Django's
runner drops the test database at the end, and PostgreSQL refuses to drop a
database another session is connected to, so this runner closes the runtime (its
workers and its pool) before the databases are torn down.

Django's ``TransactionTestCase`` (and pytest-django's ``transaction=True``) empties
the tables of Django's models after each test, not the library's: use
:class:`TransactionTestCase` here (or :class:`ResetSolidObjects` in your own base
class), or call :func:`reset` from a pytest-django fixture, and every test starts
with no actor, message or effect.
"""

from __future__ import annotations

import inspect
from typing import Any

from django.test import TransactionTestCase as DjangoTransactionTestCase
from django.test.runner import DiscoverRunner as DjangoDiscoverRunner

from ...errors import ConfigurationError
from ...runtime import Runtime
from . import close, database_url, settings


class DiscoverRunner(DjangoDiscoverRunner):
    """Django's ``DiscoverRunner`` that closes the runtime before dropping test databases."""

    def teardown_databases(self, old_config: Any, **kwargs: Any) -> None:
        close()
        super().teardown_databases(old_config, **kwargs)


def reset() -> None:
    """Empty the library's tables on Django's test database (the schema stays).

    The project's runtime is closed first (its workers stop, leases are released);
    the next :func:`~solid_objects.contrib.django.ref` builds and starts it again.
    Refused (``ConfigurationError``) unless the alias points at Django's test
    database, so a stray call can never wipe the development or production database.
    """
    from django.db import connections

    alias = settings()["DATABASE"]
    connection = connections[alias]
    current = str(connection.settings_dict.get("NAME") or "")
    expected = str(connection.creation._get_test_db_name())  # type: ignore[attr-defined]
    if current != expected:
        raise ConfigurationError(
            f"reset() empties the library's tables, so it runs only on Django's test "
            f"database: DATABASES[{alias!r}] is {current!r}, not the test database "
            f"{expected!r} (run it under manage.py test or pytest-django)"
        )
    close()
    cleaner = Runtime(database_url(alias), workers=0, allow_reset=True)
    try:
        cleaner.testing.reset()
    finally:
        cleaner.close()


class ResetSolidObjects:
    """Mixin for a ``TransactionTestCase``: the library's tables are emptied before each test.

    Before, not after, so the first test of a ``--keepdb`` run starts clean too. It
    hooks Django's per-test ``_fixture_setup`` (a classmethod since Django 5.2, a
    method before), where Django loads fixtures, so a ``setUp`` without ``super()``
    cannot skip it.
    """

    if isinstance(inspect.getattr_static(DjangoTransactionTestCase, "_fixture_setup"), classmethod):

        @classmethod
        def _fixture_setup(cls) -> None:
            reset()
            super()._fixture_setup()  # type: ignore[misc]

    else:  # pragma: no cover - Django before 5.2

        def _fixture_setup(self) -> None:  # type: ignore[misc]
            reset()
            super()._fixture_setup()  # type: ignore[misc]


class TransactionTestCase(ResetSolidObjects, DjangoTransactionTestCase):
    """Django's ``TransactionTestCase`` whose tests each start with an empty library."""
