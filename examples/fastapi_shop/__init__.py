"""A FastAPI shop: a cart actor, a checkout email sent once, an abandoned-cart reminder.

Run it: ``python -m examples.fastapi_shop`` (uvicorn, two worker processes, SQLite
``shop.db`` in the current folder; ``SHOP_DATABASE_URL`` names another database).
"""
