"""``python -m examples.fastapi_shop``: serve the shop with uvicorn, two worker processes."""

from __future__ import annotations

import os

from solid_objects.extras import requires_extra

with requires_extra("fastapi", "examples.fastapi_shop"):
    import uvicorn

if __name__ == "__main__":
    uvicorn.run(
        "examples.fastapi_shop.app:app",
        host=os.environ.get("SHOP_HOST", "127.0.0.1"),
        port=int(os.environ.get("SHOP_PORT", "8000")),
        workers=int(os.environ.get("SHOP_WEB_PROCESSES", "2")),
    )
