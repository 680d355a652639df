"""Settings of the test project: the database comes from the environment.

``SHOP_DATABASE=sqlite`` (files under ``SHOP_DIR``) or ``postgresql`` (``SHOP_PG_*``).
"""

import os
from pathlib import Path

from solid_objects.admin import allow

DIR = Path(os.environ.get("SHOP_DIR", "."))
SECRET_KEY = "test-only"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "solid_objects.contrib.django", "shop"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
TEST_RUNNER = "solid_objects.contrib.django.testing.DiscoverRunner"

if os.environ.get("SHOP_DATABASE", "sqlite") == "postgresql":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ["SHOP_PG_NAME"],
            "USER": os.environ.get("SHOP_PG_USER", ""),
            "PASSWORD": os.environ.get("SHOP_PG_PASSWORD", ""),
            "HOST": os.environ.get("SHOP_PG_HOST", ""),
            "PORT": os.environ.get("SHOP_PG_PORT", ""),
            "TEST": {"NAME": os.environ["SHOP_PG_NAME"] + "_test"},
        }
    }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DIR / "db.sqlite3",
            "TEST": {"NAME": DIR / "test.sqlite3"},
        }
    }

SOLID_OBJECTS = {
    "DATABASE": "default",
    "OPTIONS": {"workers": int(os.environ.get("SOLID_WORKERS", "2"))},
    "ADMIN_POLICY": allow({"cli:*": "*"}),  # the operator commands may do everything
}
