"""``python -m examples.django_shop [COMMAND ...]``: manage.py of the example project.

Without a command: ``migrate``, then ``runserver`` on ``SHOP_HOST:SHOP_PORT``;
``test`` runs the example's own tests.
"""

from __future__ import annotations

import os
import sys

from solid_objects.extras import requires_extra

with requires_extra("django", "examples.django_shop"):
    from django.core.management import execute_from_command_line

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.django_shop.settings")
    if sys.argv[1:2] == ["test"] and all(a.startswith("-") for a in sys.argv[2:]):
        # Its own tests by default, from whatever folder it runs in.
        execute_from_command_line(["manage.py", *sys.argv[1:], "examples.django_shop"])
    elif len(sys.argv) > 1:
        execute_from_command_line(["manage.py", *sys.argv[1:]])
    else:
        host, port = os.environ.get("SHOP_HOST", "127.0.0.1"), os.environ.get("SHOP_PORT", "8000")
        address = f"{host}:{port}"
        execute_from_command_line(["manage.py", "migrate", "--noinput"])
        execute_from_command_line(["manage.py", "runserver", address, "--noreload"])
