"""Settings of the example: the database is ``SHOP_DATABASE_URL``, as for the FastAPI shop."""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy.engine import make_url

from examples.shop import own_cart_only


def database(url: str) -> dict[str, Any]:
    """``DATABASES["default"]`` from a SQLAlchemy URL (sqlite, postgresql, mysql)."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        name = parsed.database or "shop-django.db"
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": name,
            "TEST": {"NAME": f"{name}.test"},  # a file: the runtime shares it
        }
    if backend == "mysql":
        import pymysql

        pymysql.install_as_MySQLdb()  # Django's MySQL backend on the library's driver
    return {
        "ENGINE": f"django.db.backends.{'mysql' if backend == 'mysql' else 'postgresql'}",
        "NAME": parsed.database,
        "USER": parsed.username or "",
        "PASSWORD": parsed.password or "",
        "HOST": parsed.host or "",
        "PORT": str(parsed.port or ""),
    }


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example only")
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "examples.django_shop.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["solid_objects.contrib.django", "examples.django_shop"]
MIDDLEWARE = ["solid_objects.contrib.django.middleware.ProblemDetailsMiddleware"]
DATABASES = {"default": database(os.environ.get("SHOP_DATABASE_URL", "sqlite:///shop-django.db"))}
SOLID_OBJECTS = {
    "OPTIONS": {
        "workers": int(os.environ.get("SHOP_WORKERS", "4")),
        "authorize_message": own_cart_only,
        "authorize_query": own_cart_only,
    },
}
TEST_RUNNER = "solid_objects.contrib.django.testing.DiscoverRunner"
