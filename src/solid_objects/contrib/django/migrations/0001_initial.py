"""Create or upgrade the library's tables, so ``manage.py migrate`` is the one setup step.

It runs on whatever database Django migrates, the test database included (the test
runner migrates it), through a runtime of its own that it closes, so no connection
stays open on a test database Django will drop. ``install()`` is idempotent; the
tables are not Django models and reversing the migration leaves them.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations


def install(apps: Any, schema_editor: Any) -> None:
    from solid_objects.contrib.django import build_runtime, settings

    if schema_editor.connection.alias != settings()["DATABASE"]:
        return  # the runtime's tables live in its own alias only
    runtime = build_runtime()
    try:
        runtime.install()
    finally:
        runtime.close()


class Migration(migrations.Migration):
    # Not atomic: install() writes through the runtime's own connections, which must
    # not wait behind a transaction Django holds open on the same database.
    atomic = False
    initial = True
    operations = [migrations.RunPython(install, migrations.RunPython.noop, elidable=False)]
