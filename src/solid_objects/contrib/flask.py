"""Flask integration: ``SolidObjects(app)`` / ``init_app``, lazy start, refs, problem details.

::

    app = Flask(__name__)
    app.config["SOLID_OBJECTS_DATABASE_URL"] = "sqlite:///app.db"
    solid = SolidObjects(app, context=lambda request: request.headers.get("x-user"))

    @app.post("/carts/<cart_id>/items")
    def add(cart_id: str):
        return {"count": solid.ref(Cart, cart_id).add(sku=request.args["sku"])}

The runtime starts on the first request (or the first :meth:`SolidObjects.ref`) in
the process that serves it, never at import or in ``init_app``: the Werkzeug
reloader's parent process (``flask run --reload``) only watches files and never
serves, and a pre-forking server (gunicorn) forks before any request, so worker
threads are never started in a process that forks or merely supervises. The
dedicated worker is ``solid-objects worker myapp:solid.runtime``.

Configuration (``app.config``):

- ``SOLID_OBJECTS_DATABASE_URL``: the database, unless ``runtime=`` is given.
- ``SOLID_OBJECTS_OPTIONS``: a dict of :class:`~solid_objects.Runtime` options
  (``{"workers": 0}`` for web processes that leave the work to dedicated workers).
- ``SOLID_OBJECTS_INSTALL``: create or upgrade the tables at start (default True).
- ``SOLID_OBJECTS_ALLOW_ALL_CALLERS``: the same as ``allow_all_callers=True``.

Inside a request, :meth:`SolidObjects.ref` builds a ref from request data: a kind of
call the runtime has no ``authorize_*`` policy for is denied (403) unless
``allow_all_callers=True`` opts in to letting every caller through (:mod:`.access`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from ..extras import requires_extra

with requires_extra("flask", "solid_objects.contrib.flask"):
    from flask import (
        Flask,
        Response,
        current_app,
        g,
        has_app_context,
        has_request_context,
        request,
    )
    from flask import json as flask_json

from ..actor import Actor
from ..errors import ConfigurationError
from ..ref import Ref
from ..runtime import Runtime
from ..testing import runtime_like
from . import access, idempotency, problems
from .idempotency import InvalidIdempotencyKey, RequestKeys

__all__ = ["RequestKeys", "SolidObjects", "idempotency_keys", "problem_response"]

A = TypeVar("A", bound=Actor)

#: The authorization-context hook: Flask's request in, what the policies should see out.
Context = Callable[[Any], Any]
#: The key of ``app.extensions`` under which an application's extension is found.
EXTENSION = "solid_objects"


def problem_response(exc: Exception) -> Response:
    """The RFC 9457 ``application/problem+json`` response for a library error."""
    body = problems.document(exc)
    response = Response(flask_json.dumps(body), status=body["status"], mimetype=problems.MEDIA_TYPE)
    response.headers.update(problems.headers(exc))
    return response


def idempotency_keys(*, required: bool = False) -> RequestKeys:
    """The current request's ``Idempotency-Key``, for keying its calls (:mod:`.idempotency`).

    One :class:`~.idempotency.RequestKeys` per request (kept on ``flask.g``). A
    malformed header, or a missing one with ``required=True``, raises
    ``InvalidIdempotencyKey`` (400).
    """
    found = g.get("solid_objects_keys")
    if not isinstance(found, RequestKeys):
        found = idempotency.from_headers(request.headers, required=required)
        g.solid_objects_keys = found
    elif required and not found:
        raise InvalidIdempotencyKey(f"this request needs an {idempotency.HEADER} header")
    return found


class SolidObjects:
    """The Flask extension: one runtime, started lazily in the serving process."""

    def __init__(
        self,
        app: Flask | None = None,
        *,
        runtime: Runtime | None = None,
        context: Context | None = None,
        allow_all_callers: bool = False,
    ) -> None:
        self._runtime = runtime
        self.context = context
        self.allow_all_callers = allow_all_callers
        self._install = True
        self._started = False
        self._lock = threading.Lock()
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask) -> None:
        """Build the runtime from ``app.config`` (unless given) and hook into ``app``.

        Nothing starts here: see the module's docstring.
        """
        if self._runtime is None:
            url = app.config.get("SOLID_OBJECTS_DATABASE_URL")
            if not url:
                raise ConfigurationError(
                    "SolidObjects(app) needs app.config['SOLID_OBJECTS_DATABASE_URL'] "
                    "(e.g. 'sqlite:///app.db'), or SolidObjects(app, runtime=Runtime(...))"
                )
            options = app.config.get("SOLID_OBJECTS_OPTIONS") or {}
            if not isinstance(options, dict):
                raise ConfigurationError("SOLID_OBJECTS_OPTIONS must be a dict of Runtime options")
            self._runtime = Runtime(url, **options)
        self._install = bool(app.config.get("SOLID_OBJECTS_INSTALL", True))
        if app.config.get("SOLID_OBJECTS_ALLOW_ALL_CALLERS"):
            self.allow_all_callers = True
        app.extensions[EXTENSION] = self
        app.before_request(self.start)
        for cls in problems.handled():
            app.register_error_handler(cls, problem_response)

    @property
    def runtime(self) -> Runtime:
        """The runtime (``solid-objects worker myapp:solid.runtime`` names it)."""
        if self._runtime is None:
            raise ConfigurationError("SolidObjects has no runtime yet: call init_app(app) first")
        return self._runtime

    def start(self) -> None:
        """Install (``SOLID_OBJECTS_INSTALL``) and start the runtime, once per process.

        Called before every request; after the first it only reads a flag.
        """
        if self._started:
            return
        with self._lock:
            if self._started:
                return
            if self._install:
                self.runtime.install()
            self.runtime.start()
            self._started = True

    def close(self) -> None:
        """Finish in-flight turns, release leases, close the pool; the next request restarts."""
        with self._lock:
            self._started = False
            self.runtime.close()

    def ref(self, cls: type[A], actor_id: str) -> Ref[A]:
        """``runtime.ref(cls, actor_id)``, carrying ``context(request)`` inside a request.

        Inside a request the ref is untrusted (its id is request data): a kind of call
        with no ``authorize_*`` policy is denied unless ``allow_all_callers``. Outside
        one (a CLI command, a shell) it is the application's own, trusted ref.
        """
        self.start()
        reference = self.runtime.ref(cls, actor_id)
        if not has_request_context():
            return reference
        context = None if self.context is None else self.context(request)
        return access.bind(reference, context, allow_all_callers=self.allow_all_callers)

    @contextmanager
    def use_database(self, url: str) -> Iterator[Runtime]:
        """For tests: the block's requests run on a runtime like this one, on ``url``.

        The runtime (its options, policies, actor classes and handlers copied:
        :func:`solid_objects.testing.runtime_like`) starts on the first request, as
        usual, and is closed when the block ends; the application's own runtime, closed
        first if it had started, takes over again after. Give it the pytest plugin's
        ``solid_db_url`` for a fresh database per test.
        """
        own = self.runtime
        if self._started:
            self.close()
        install = self._install
        test_runtime = cast(Runtime, runtime_like(own, url))
        with self._lock:
            self._runtime, self._install = test_runtime, True
        try:
            yield test_runtime
        finally:
            self.close()
            with self._lock:
                self._runtime, self._install = own, install

    @staticmethod
    def of_app(app: Flask | None = None) -> SolidObjects:
        """The extension ``init_app`` installed on ``app`` (default: the current app)."""
        if app is None:
            if not has_app_context():
                raise ConfigurationError("SolidObjects.of_app() outside an application context")
            app = current_app
        found = app.extensions.get(EXTENSION)
        if not isinstance(found, SolidObjects):
            raise ConfigurationError(f"SolidObjects.init_app() was not called on {app!r}")
        return found
