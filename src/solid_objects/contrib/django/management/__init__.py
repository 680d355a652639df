"""``manage.py solid_objects``: the library's CLI inside a Django project."""

