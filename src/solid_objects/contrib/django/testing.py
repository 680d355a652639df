"""``TEST_RUNNER = "solid_objects.contrib.django.testing.DiscoverRunner"``.

Django's runner drops the test database at the end, and PostgreSQL refuses to drop
a database another session is connected to: this runner closes the runtime (its
workers and its pool) before the databases are torn down.
"""

from __future__ import annotations

from typing import Any

from django.test.runner import DiscoverRunner as DjangoDiscoverRunner

from . import close


class DiscoverRunner(DjangoDiscoverRunner):
    """Django's ``DiscoverRunner`` that closes the runtime before dropping test databases."""

    def teardown_databases(self, old_config: Any, **kwargs: Any) -> None:
        close()
        super().teardown_databases(old_config, **kwargs)
