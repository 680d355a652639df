"""The Django app: label ``solid_objects``, imports every installed app's ``actors`` module."""

from __future__ import annotations

from django.apps import AppConfig


class SolidObjectsConfig(AppConfig):
    """Registered as ``"solid_objects.contrib.django"`` in ``INSTALLED_APPS``."""

    name = "solid_objects.contrib.django"
    label = "solid_objects"
    verbose_name = "Solid Objects"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Like admin.py: the worker command knows every actor class the project defines.
        from django.utils.module_loading import autodiscover_modules

        autodiscover_modules("actors")
