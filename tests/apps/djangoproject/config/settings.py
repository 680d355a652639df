"""Settings of the test project: the database comes from the environment.

``SHOP_DATABASE=sqlite`` (files under ``SHOP_DIR``), ``postgresql`` or ``mysql``
(``SHOP_DB_*``).
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
ROOT_URLCONF = "config.urls"
MIDDLEWARE = ["solid_objects.contrib.django.middleware.ProblemDetailsMiddleware"]

BACKEND = os.environ.get("SHOP_DATABASE", "sqlite")
if BACKEND in ("postgresql", "mysql"):
    if BACKEND == "mysql":
        import pymysql

        pymysql.install_as_MySQLdb()  # Django's MySQL backend on PyMySQL, the library's driver
    DATABASES = {
        "default": {
            "ENGINE": f"django.db.backends.{BACKEND}",
            "NAME": os.environ["SHOP_DB_NAME"],
            "USER": os.environ.get("SHOP_DB_USER", ""),
            "PASSWORD": os.environ.get("SHOP_DB_PASSWORD", ""),
            "HOST": os.environ.get("SHOP_DB_HOST", ""),
            "PORT": os.environ.get("SHOP_DB_PORT", ""),
            "TEST": {"NAME": os.environ["SHOP_DB_NAME"] + "_test"},
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
    # The views' refs come from the URL: no policy here, so every caller, explicitly
    # (shop/checks_requests.py turns it off to see the default deny).
    "ALLOW_ALL_CALLERS": True,
}
