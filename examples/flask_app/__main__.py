"""``python -m examples.flask_app``: Flask's development server.

The runtime's workers start on the first request, in the serving process.
"""

from __future__ import annotations

import os

from . import app

if __name__ == "__main__":
    host, port = os.environ.get("POLLS_HOST", "127.0.0.1"), os.environ.get("POLLS_PORT", "5000")
    app.run(host=host, port=int(port))
