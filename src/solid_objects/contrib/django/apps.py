"""The Django app: label ``solid_objects``, imports every installed app's ``actors`` module.

It also guards Django's connections against ORM writes from inside a turn (orm.py).
"""

from __future__ import annotations

from django.apps import AppConfig


class SolidObjectsConfig(AppConfig):
    """Registered as ``"solid_objects.contrib.django"`` in ``INSTALLED_APPS``."""

    name = "solid_objects.contrib.django"
    label = "solid_objects"
    verbose_name = "Solid Objects"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db import connections
        from django.db.backends.signals import connection_created
        from django.utils.module_loading import autodiscover_modules

        from .orm import guard_connection

        # ORM writes from actor code or a commit action are refused (see orm.py).
        connection_created.connect(guard_connection, dispatch_uid="solid_objects_guard")
        for connection in connections.all(initialized_only=True):
            guard_connection(connection=connection)
        # Like admin.py: the worker command knows every actor class the project defines.
        autodiscover_modules("actors")
