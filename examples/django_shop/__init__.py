"""The shop as a Django project: the same cart actor as ``examples/fastapi_shop``.

Run it: ``python -m examples.django_shop`` (migrates, then serves on
http://127.0.0.1:8000 with Django's development server; SQLite ``shop-django.db`` in
the current folder, ``SHOP_DATABASE_URL=postgresql+psycopg://...`` names another
database). ``python -m examples.django_shop test`` runs its tests,
``python -m examples.django_shop solid_objects worker`` a dedicated worker.
"""
