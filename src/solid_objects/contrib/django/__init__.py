"""Django integration: an app for ``INSTALLED_APPS``, a runtime built from ``DATABASES``.

::

    INSTALLED_APPS = [..., "solid_objects.contrib.django"]
    SOLID_OBJECTS = {"DATABASE": "default", "OPTIONS": {"workers": 4}}

    from django.db import connection, transaction
    from solid_objects.contrib.django import ref

    ref(Cart, "c1").add(sku="tea")                    # a call: waits for the result
    with transaction.atomic():                         # the application-side outbox:
        Order.objects.create(cart="c1")                # the message commits with the
        ref(Cart, "c1").checkout.send()                # order (a call here is refused)

The runtime is built from ``DATABASES[alias]`` on first use, not at import, and is
built again whenever that alias's ``NAME`` changes: Django's test runner (and
pytest-django) rename the database to the test database before any test runs, so
the runtime follows it and ``manage.py test`` never writes into the development
database. Hold no runtime at import time; call :func:`runtime` or :func:`ref` where
it is used.

``manage.py migrate`` creates the library's tables (this app's migration calls
``install()``), ``manage.py solid_objects worker`` runs the dedicated worker.
``with_options(connection=django.db.connection)`` enqueues in Django's transaction
(exactly once with the application's rows, :mod:`.transactions`);
:func:`send_on_commit` is the alternative that sends after the commit (at most once).
:func:`effect` and :func:`commit_action` register handlers on every runtime built
here; a commit action writes Django models' tables through ``ctx.connection`` with
:func:`table` (:mod:`.orm` says why not the ORM).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from sqlalchemy.engine import URL

from ...extras import requires_extra

# Its modules import Django where they use it; without it, say so at the import.
with requires_extra("django", "solid_objects.contrib.django"):
    import django  # noqa: F401

from ...actor import Actor
from ...errors import ConfigurationError
from ...ref import Ref
from ...runtime import Runtime
from .. import access, idempotency
from ..idempotency import InvalidIdempotencyKey, RequestKeys
from . import transactions
from .orm import close_turn_connections, table
from .transactions import CallInsideAtomicBlock

__all__ = [
    "CallInsideAtomicBlock",
    "build_runtime",
    "close",
    "commit_action",
    "database_url",
    "effect",
    "idempotency_keys",
    "ref",
    "runtime",
    "send_on_commit",
    "settings",
    "table",
]

A = TypeVar("A", bound=Actor)
H = TypeVar("H", bound=Callable[..., Any])

#: Django's OPTIONS for PostgreSQL that configure Django itself, not the libpq connection.
_DJANGO_ONLY_OPTIONS = {"isolation_level", "server_side_binding", "pool", "assume_role"}

transactions.install()  # connection= accepts django.db.connection

_lock = threading.RLock()
_current: tuple[URL, Runtime] | None = None
_started = False
#: Handlers registered with :func:`effect` / :func:`commit_action`, given to every runtime.
_effects: dict[str, Callable[..., Any]] = {}
_commit_actions: dict[str, Callable[..., Any]] = {}


class Sendable(Protocol):
    """An operation of a ref (``ref(Cart, "c1").add``): what :func:`send_on_commit` sends."""

    def send(self, *args: Any, **kwargs: Any) -> Any:
        """Enqueue the operation durably and return its message reference."""
        ...


def settings() -> dict[str, Any]:
    """``settings.SOLID_OBJECTS`` with its defaults (``DATABASE``, ``OPTIONS``, ...)."""
    from django.conf import settings as django_settings

    configured = getattr(django_settings, "SOLID_OBJECTS", None) or {}
    if not isinstance(configured, Mapping):
        raise ConfigurationError("settings.SOLID_OBJECTS must be a dict")
    unknown = set(configured) - {"DATABASE", "OPTIONS", "ADMIN_POLICY", "ALLOW_ALL_CALLERS"}
    if unknown:
        raise ConfigurationError(
            f"settings.SOLID_OBJECTS has unknown keys {sorted(unknown)}; known: DATABASE "
            "(an alias of DATABASES), OPTIONS (Runtime options), ADMIN_POLICY (the "
            "administration policy, or the dotted path of one), ALLOW_ALL_CALLERS (let "
            "refs built by ref() through where no authorize_* policy decides)"
        )
    options = configured.get("OPTIONS") or {}
    if not isinstance(options, Mapping):
        raise ConfigurationError("settings.SOLID_OBJECTS['OPTIONS'] must be a dict")
    policy = configured.get("ADMIN_POLICY")
    if isinstance(policy, str):
        from django.utils.module_loading import import_string

        try:
            policy = import_string(policy.replace(":", "."))
        except ImportError as exc:
            raise ConfigurationError(f"SOLID_OBJECTS['ADMIN_POLICY']: {exc}") from None
    if policy is not None and not callable(policy):
        raise ConfigurationError(
            "SOLID_OBJECTS['ADMIN_POLICY'] must be a policy (e.g. solid_objects.admin.allow"
            f"({{'cli:*': 'read'}})) or the dotted path of one, not {policy!r}"
        )
    allow_all = configured.get("ALLOW_ALL_CALLERS", False)
    if not isinstance(allow_all, bool):
        raise ConfigurationError(
            f"SOLID_OBJECTS['ALLOW_ALL_CALLERS'] must be True or False, not {allow_all!r}"
        )
    return {
        "DATABASE": str(configured.get("DATABASE", "default")),
        "OPTIONS": dict(options),
        "ADMIN_POLICY": policy,
        "ALLOW_ALL_CALLERS": allow_all,
    }


def database_url(alias: str | None = None) -> URL:
    """The SQLAlchemy URL of ``DATABASES[alias]`` as Django sees it now.

    Read from ``connections[alias].settings_dict``, which Django's test runner points
    at the test database. An in-memory SQLite database (Django's default test
    database for SQLite) is private to one connection, so the runtime could not share
    it: that is refused, naming the ``TEST`` setting that gives it a file.
    """
    from django.db import connections

    alias = alias or settings()["DATABASE"]
    try:
        # The dict each connection's settings_dict is (the test runner renames NAME in
        # it), read without loading the backend's driver.
        config = connections.settings[alias]
    except KeyError:
        raise ConfigurationError(f"settings.DATABASES has no alias {alias!r}") from None
    engine = str(config.get("ENGINE", ""))
    name = str(config.get("NAME") or "")
    vendor = engine.rsplit(".", 1)[-1]
    if vendor == "sqlite3":
        if not name or name == ":memory:" or "mode=memory" in name:
            raise ConfigurationError(
                f"DATABASES[{alias!r}] is an in-memory SQLite database ({name or 'no NAME'}), "
                "which only one connection can see and the runtime cannot share. Give it a "
                f"file: NAME = BASE_DIR / 'db.sqlite3', and for tests "
                f"DATABASES[{alias!r}]['TEST'] = {{'NAME': BASE_DIR / 'test.sqlite3'}}"
            )
        return URL.create("sqlite", database=name)
    options = dict(config.get("OPTIONS") or {})
    if vendor == "postgresql":
        drivername = "postgresql+psycopg"
        query = {k: v for k, v in options.items() if k not in _DJANGO_ONLY_OPTIONS}
    elif vendor == "mysql":
        drivername = "mysql+pymysql"
        query = {k: v for k, v in options.items() if k == "charset"}
    else:
        raise ConfigurationError(
            f"DATABASES[{alias!r}] uses {engine!r}; the runtime supports Django's sqlite3, "
            "postgresql and mysql backends"
        )
    for key, value in query.items():
        if not isinstance(value, str | int | float):
            raise ConfigurationError(
                f"DATABASES[{alias!r}]['OPTIONS'][{key!r}] is a {type(value).__name__}; "
                "only text and numbers pass to the runtime's connection"
            )
    port = config.get("PORT")
    return URL.create(
        drivername,
        username=config.get("USER") or None,
        password=config.get("PASSWORD") or None,
        host=config.get("HOST") or None,
        port=int(port) if port else None,
        database=name,
        query={k: str(v) for k, v in query.items()},
    )


def build_runtime() -> Runtime:
    """A new runtime on the configured database (the caller owns and closes it)."""
    configured = settings()
    built = Runtime(database_url(configured["DATABASE"]), **configured["OPTIONS"])
    # Inside atomic() a send joins Django's transaction; a call is refused.
    built.enlist_sends(transactions.atomic_blocks(configured["DATABASE"]))
    if configured["ADMIN_POLICY"] is not None:
        built.admin.set_policy(configured["ADMIN_POLICY"])
    with _lock:
        for name, handler in _effects.items():
            built.effect(name)(handler)
        for name, handler in _commit_actions.items():
            built.commit_action(name)(handler)
    return built


def effect(name: str) -> Callable[[H], H]:
    """``@effect("send_email")``: ``runtime().effect(name)`` on every runtime built here.

    The runtime is built on first use and again on the test database, so handlers are
    kept here and given to each; put them in an app's ``actors.py`` (imported at start).
    """

    def register(handler: H) -> H:
        with _lock:
            _effects[name] = handler
            if _current is not None:
                _current[1].effect(name)(handler)
        return handler

    return register


def commit_action(name: str) -> Callable[[H], H]:
    """``@commit_action("record_order")``: ``runtime().commit_action(name)`` on every runtime.

    The handler writes Django models' tables through ``ctx.connection`` (the turn's
    transaction), e.g. ``ctx.connection.execute(table(Order).insert().values(...))``:
    the ORM writes on Django's own connection, outside the turn (see :mod:`.orm`).
    """

    def register(handler: H) -> H:
        with _lock:
            _commit_actions[name] = handler
            if _current is not None:
                _current[1].commit_action(name)(handler)
        return handler

    return register


def runtime() -> Runtime:
    """The process's runtime on ``DATABASES[SOLID_OBJECTS['DATABASE']]``, built on first use.

    When the alias's database changed since it was built (the test runner switched to
    the test database), the old runtime is closed and a new one is built on the new
    database. ``solid_objects.contrib.django:runtime`` is the ``MODULE:RUNTIME`` target
    the ``solid-objects`` command line accepts too.
    """
    global _current, _started
    url = database_url()
    with _lock:
        if _current is not None and _current[0] != url:
            _current[1].close()
            _current, _started = None, False
        if _current is None:
            _refuse_if_blocked()
            _current = (url, build_runtime())
        return _current[1]


def _refuse_if_blocked() -> None:
    """Django may not touch this database now: the runtime must not either.

    pytest-django blocks database access in tests without the ``django_db`` mark (its
    test database may not even exist yet): building the runtime then would put it on
    the development database. Asking Django for a connection raises its own error.
    """
    from django.db import connections

    connections[settings()["DATABASE"]].ensure_connection()


def ref(cls: type[A], actor_id: str, *, authorization: Any = None) -> Ref[A]:
    """A ref for a view: ``runtime().ref(cls, actor_id)``, the runtime started on first use.

    Started here, never at import or in ``AppConfig.ready``: ``runserver``'s reloader
    parent and a pre-forking server's master never serve, so they never run workers.
    ``OPTIONS = {"workers": 0}`` makes a process a caller only.

    The id comes from the request, so the ref is untrusted: ``authorization`` (the
    request's user) is what the policies see, and a kind of call with no
    ``authorize_*`` policy is denied unless ``SOLID_OBJECTS["ALLOW_ALL_CALLERS"]``
    (:mod:`solid_objects.contrib.access`). The application's own code (a management
    command, a task) uses ``runtime().ref(...)``, which the defaults trust.
    """
    global _started
    with _lock:
        current = runtime()
        if not _started:
            current.start()
            _started = True
    allow_all = settings()["ALLOW_ALL_CALLERS"]
    return access.bind(current.ref(cls, actor_id), authorization, allow_all_callers=allow_all)


def idempotency_keys(request: Any, *, required: bool = False) -> RequestKeys:
    """The request's ``Idempotency-Key``, for keying its calls (:mod:`..idempotency`).

    One :class:`~solid_objects.contrib.idempotency.RequestKeys` per request (kept on
    the request). A malformed header, or a missing one with ``required=True``, raises
    ``InvalidIdempotencyKey`` (400 with the ``ProblemDetailsMiddleware``).
    """
    found = getattr(request, "solid_objects_keys", None)
    if not isinstance(found, RequestKeys):
        found = idempotency.from_headers(request.headers, required=required)
        request.solid_objects_keys = found
    elif required and not found:
        raise InvalidIdempotencyKey(f"this request needs an {idempotency.HEADER} header")
    return found


def close() -> None:
    """Finish in-flight turns, release leases and close the pool (the next use restarts)."""
    global _current, _started
    with _lock:
        if _current is not None:
            _current[1].close()
        _current, _started = None, False
    close_turn_connections()


def send_on_commit(
    operation: Sendable, /, *args: Any, using: str | None = None, **kwargs: Any
) -> None:
    """Send ``operation(*args, **kwargs)`` once Django's transaction on ``using`` commits.

    Inside ``transaction.atomic()`` a rollback sends nothing; outside one (autocommit)
    it sends now. It is ``transaction.on_commit``: the send happens after the
    application's commit, so a process that dies between the two loses the message
    (at most once). Where a message must commit with the rows, enqueue it in the
    transaction: ``operation.with_options(connection=django.db.connection).send(...)``.
    """
    from django.db import transaction

    transaction.on_commit(
        lambda: operation.send(*args, **kwargs), using=using or settings()["DATABASE"]
    )
