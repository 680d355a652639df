"""The operator dashboard: ``dashboard(runtime, principal=...)``, a Starlette ASGI app.

Everything it shows or changes goes through ``runtime.admin`` acting as the
principal the host application names for the request, so the application's
administration policy decides every read and every write (per action, with the
API's action names) and every change is audited with that principal. The
dashboard has no SQL and no authority of its own: a principal the policy lets
only read sees no buttons, and its forged POST meets the same ``Unauthorized``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, parse_qsl, quote, urlencode

from ..extras import requires_extra

with requires_extra("web", "solid_objects.web.dashboard"):
    from jinja2 import Environment, FileSystemLoader, select_autoescape
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, RedirectResponse, Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

from ..errors import InvalidArguments, NotFound, OperationRefused, Unauthorized
from .charts import activity_charts
from .security import ASGIApp, CsrfTokens, SecurityHeaders

if TYPE_CHECKING:
    from ..admin import Administration
    from ..runtime import Runtime

Principal = Callable[[Request], "str | None"]

HERE = Path(__file__).parent
#: Rows per page of every listing.
#: The overview counts the actors of a type up to this many (it refreshes every 5 s).
OVERVIEW_ACTORS_UP_TO = 10_000
PAGE_SIZE = 50
#: The overview's charts: the last hour, a bar a minute.
ACTIVITY_MINUTES, ACTIVITY_BUCKET = 60, 60
#: Recent messages on an actor's page.
ACTOR_MESSAGES = 20
#: Largest form body a mutation accepts (ids of MAX_LIMIT dead letters fit easily).
MAX_BODY = 256 * 1024


class Anonymous(Exception):
    """The host's ``principal(request)`` named nobody: 401."""


class CsrfRejected(Exception):
    """A mutation without this principal's CSRF token: 403."""


def _pretty(value: Any) -> str:
    """JSON for people; Jinja escapes it like any other text."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _short(value: Any, width: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


def _error_text(error: Any) -> str:
    if isinstance(error, Mapping):
        return f"{error.get('type', 'Error')}: {error.get('message', '')}"
    return "" if error is None else _short(error, 200)


def _templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(pretty=_pretty, short=_short, when=_when, error_text=_error_text, q=_quote)
    return env


class DashboardApp(Starlette):
    """A Starlette app whose every response, error pages included, carries the headers."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())


def _replica_lag(shown: Iterable[object]) -> float | None:
    """How far behind the primary the page's listings may be, when any was read from
    the replica (the most of them); None when all were the primary's."""
    lags = [lag for v in shown if (lag := getattr(v, "replica_lag_ms", None)) is not None]
    return max(lags) if lags else None


def _safe_next(value: str | None) -> str:
    """Only a path inside the dashboard: never an open redirect."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


class _Dashboard:
    def __init__(self, runtime: Runtime, principal: Principal, csrf: CsrfTokens) -> None:
        self.runtime = runtime
        self.principal = principal
        self.csrf = csrf
        self.env = _templates()

    # --- plumbing -----------------------------------------------------------------------

    def who(self, request: Request) -> str:
        """The host's ``principal(request)``, asked once per request (pages show it too)."""
        name = self.principal(request)
        if name is None:
            raise Anonymous()
        request.state.solid_principal = name
        return name

    def ops(self, request: Request) -> Administration:
        return self.runtime.admin.as_principal(self.who(request))

    def render(
        self, request: Request, template: str, *, status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        principal: str | None = getattr(request.state, "solid_principal", None)
        base = str(request.scope.get("root_path", "")).rstrip("/")
        here = _raw_path(request)[len(quote(base)) :] or "/"
        if request.url.query:
            here += "?" + request.url.query
        html = self.env.get_template(template).render(
            base=base,
            here=here,
            nonce=request.state.csp_nonce,
            principal=principal,
            csrf=None if principal is None else self.csrf.issue(principal),
            replica_lag_ms=_replica_lag(context.values()),
            **context,
        )
        return HTMLResponse(html, status_code=status_code)

    async def form(self, request: Request) -> tuple[Administration, dict[str, list[str]]]:
        """The POSTed form, once the principal and its CSRF token are checked.

        The host's ``principal`` runs in a worker thread, as on the GET pages, so it
        may do blocking work (read a Django session, say).
        """
        ops = await run_in_threadpool(self.ops, request)
        body = await request.body()
        if len(body) > MAX_BODY:
            raise InvalidArguments("form too large")
        try:
            fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=2000)
        except (UnicodeDecodeError, ValueError):
            raise InvalidArguments("not a form") from None
        token = request.headers.get("x-csrf-token") or _first(fields, "csrf")
        assert ops.principal is not None
        if not self.csrf.check(ops.principal, token):
            raise CsrfRejected()
        return ops, fields

    def back(
        self,
        request: Request,
        fields: Mapping[str, list[str]],
        extra: Mapping[str, str] | None = None,
    ) -> Response:
        base = str(request.scope.get("root_path", "")).rstrip("/")
        target = _safe_next(_first(fields, "next"))
        if extra:
            path, _, query = target.partition("?")
            pairs = [(k, v) for k, v in parse_qsl(query) if k not in extra]
            target = path + "?" + urlencode([*pairs, *extra.items()])
        return RedirectResponse(base + target, status_code=303)

    # --- error pages --------------------------------------------------------------------

    def error(self, request: Request, status: int, title: str, detail: str) -> HTMLResponse:
        return self.render(request, "error.html", status_code=status, title=title, detail=detail)

    async def on_anonymous(self, request: Request, exc: Exception) -> Response:
        return self.error(request, 401, "Not signed in", "This dashboard needs a signed-in user.")

    async def on_csrf(self, request: Request, exc: Exception) -> Response:
        return self.error(
            request, 403, "Refused", "The form carried no valid CSRF token: reload the page."
        )

    async def on_unauthorized(self, request: Request, exc: Exception) -> Response:
        return self.error(request, 403, "Not allowed", str(exc))

    async def on_not_found(self, request: Request, exc: Exception) -> Response:
        return self.error(request, 404, "Not found", str(exc))

    async def on_invalid(self, request: Request, exc: Exception) -> Response:
        return self.error(request, 400, "Invalid request", str(exc))

    async def on_refused(self, request: Request, exc: Exception) -> Response:
        return self.error(request, 409, "Refused", str(exc))

    # --- pages --------------------------------------------------------------------------

    def overview(self, request: Request) -> Response:
        ops = self.ops(request)
        status_data = ops.status(actors_up_to=OVERVIEW_ACTORS_UP_TO)
        return self.render(request, "overview.html", status_data=status_data)

    def activity(self, request: Request) -> Response:
        """The overview's charts, a page of their own that the overview loads after it
        shows: their scan of the messages table grows with what retention keeps, and
        must not hold up the counts."""
        ops = self.ops(request)
        activity = ops.activity(since_minutes=ACTIVITY_MINUTES, bucket_seconds=ACTIVITY_BUCKET)
        return self.render(
            request, "activity.html", activity=activity, charts=activity_charts(activity)
        )

    def actors(self, request: Request) -> Response:
        ops = self.ops(request)
        q = request.query_params
        actor_type, actor_id = q.get("type") or None, q.get("id") or None
        if actor_type and actor_id:
            base = str(request.scope.get("root_path", "")).rstrip("/")
            path = f"{base}/actors/{_quote(actor_type)}/{_quote(actor_id)}"
            return RedirectResponse(path, status_code=303)
        types = self.runtime.registry.types()
        page = None
        id_prefix = q.get("prefix") or None
        if actor_type:
            page = ops.list_actors(
                actor_type, id_prefix=id_prefix, limit=PAGE_SIZE, cursor=q.get("cursor") or None
            )
        return self.render(
            request,
            "actors.html",
            types=types,
            actor_type=actor_type,
            id_prefix=id_prefix,
            page=page,
            next_url=_next_url(request, page),
        )

    def actor(self, request: Request) -> Response:
        ops = self.ops(request)
        actor_type = request.path_params["actor_type"]
        actor_id = request.path_params["actor_id"]
        detail = ops.inspect_actor(actor_type, actor_id)
        recent = ops.actor_messages(
            actor_type,
            actor_id,
            limit=ACTOR_MESSAGES,
            cursor=request.query_params.get("cursor") or None,
        )
        history = None
        if ops.allowed("audit.list", target_id=f"{actor_type}/{actor_id}", principal=None):
            # Every change that touched the actor: a pause, a retried dead letter of it.
            history = ops.audit_log(actor_type=actor_type, actor_id=actor_id, limit=20)
        target = {"actor_type": actor_type, "actor_id": actor_id}
        journal = (  # a journaled class's turns and the states around them
            ops.actor_history(actor_type, actor_id, limit=ACTOR_MESSAGES)
            if ops.allowed("actors.history", **target)
            else []
        )
        return self.render(
            request,
            "actor.html",
            a=detail,
            journal=journal,
            actor_status=_actor_status(detail),
            recent=recent,
            next_url=_next_url(request, recent),
            history=history,
            can_pause=ops.allowed("actors.pause", **target),
            can_resume=ops.allowed("actors.resume", **target),
            can_effects=ops.allowed("effects.retry"),
            reminder_changes=_reminder_changes(ops, actor_type, actor_id),
        )

    def dead_letters(self, request: Request) -> Response:
        ops = self.ops(request)
        q = request.query_params
        filters = {
            "actor_type": q.get("type") or None,
            "actor_id": q.get("actor") or None,
            "operation": q.get("operation") or None,
        }
        state = q.get("state") or "open"
        page = ops.list_dead_letters(
            **filters, state=state, limit=PAGE_SIZE, cursor=q.get("cursor") or None
        )
        retried = []
        for message_id in (q.get("retried") or "").split(",")[:PAGE_SIZE]:
            if message_id:
                letter = ops.get_dead_letter(message_id)
                retried.append(
                    {
                        "message_id": letter.id,
                        "retry_message_id": letter.retry_message_id,
                        "already": False,
                        "actor_type": letter.actor_type,
                        "actor_id": letter.actor_id,
                    }
                )
        return self.render(
            request,
            "dead_letters.html",
            retried=retried,
            page=page,
            q=q,
            state=state,
            next_url=_next_url(request, page),
            can_retry=ops.allowed("dead_letters.retry"),
            can_discard=ops.allowed("dead_letters.discard"),
        )

    def retrying(self, request: Request) -> Response:
        """Messages and effects that failed and wait for their next attempt."""
        ops = self.ops(request)
        q = request.query_params
        effects = ops.list_effects(
            status="retrying", limit=PAGE_SIZE, cursor=q.get("cursor") or None
        )
        options = self.runtime.options
        return self.render(
            request,
            "retrying.html",
            messages=ops.retrying_messages(limit=PAGE_SIZE),
            effects=effects,
            now=effects.now,
            next_url=_next_url(request, effects),
            max_attempts=options.max_attempts,
            max_effect_attempts=options.effect_max_attempts,
        )

    def effects(self, request: Request) -> Response:
        ops = self.ops(request)
        q = request.query_params
        status = q.get("status") or "dead"
        page = ops.list_effects(
            status=status,
            actor_type=q.get("type") or None,
            name=q.get("name") or None,
            limit=PAGE_SIZE,
            cursor=q.get("cursor") or None,
        )
        return self.render(
            request,
            "effects.html",
            page=page,
            limits=ops.effect_limits(),
            turn_limits=ops.turn_limits() if ops.allowed("status") else [],
            q=q,
            status=status,
            next_url=_next_url(request, page),
            can_retry=status == "dead" and ops.allowed("effects.retry"),
        )

    def reminders(self, request: Request) -> Response:
        ops = self.ops(request)
        q = request.query_params
        actor_type, actor_id = q.get("type") or None, q.get("actor") or None
        page = ops.list_reminders(
            actor_type=actor_type,
            actor_id=actor_id,
            limit=PAGE_SIZE,
            cursor=q.get("cursor") or None,
        )
        return self.render(
            request,
            "reminders.html",
            page=page,
            q=q,
            next_url=_next_url(request, page),
            changes=_reminder_changes(ops, actor_type, actor_id),
        )

    def processes(self, request: Request) -> Response:
        ops = self.ops(request)
        q = request.query_params
        stopped = q.get("stopped") == "1"
        page = ops.list_processes(
            include_stopped=stopped, limit=PAGE_SIZE, cursor=q.get("cursor") or None
        )
        return self.render(
            request,
            "processes.html",
            page=page,
            stopped=stopped,
            next_url=_next_url(request, page),
            can_recover=ops.allowed("processes.recover"),
        )

    def audit(self, request: Request) -> Response:
        ops = self.ops(request)
        q = request.query_params
        page = ops.audit_log(
            target_id=q.get("target") or None,
            principal=q.get("principal") or None,
            limit=PAGE_SIZE,
            cursor=q.get("cursor") or None,
        )
        return self.render(request, "audit.html", page=page, q=q, next_url=_next_url(request, page))

    # --- mutations ----------------------------------------------------------------------

    async def set_paused(self, request: Request) -> Response:
        ops, fields = await self.form(request)
        actor_type = request.path_params["actor_type"]
        actor_id = request.path_params["actor_id"]
        reason = _first(fields, "reason") or None
        change = {"pause": ops.pause_actor, "resume": ops.resume_actor}[
            _change(request, ("pause", "resume"))
        ]
        await run_in_threadpool(change, actor_type, actor_id, reason=reason)
        return self.back(request, fields)

    async def dead_letter_action(self, request: Request) -> Response:
        ops, fields = await self.form(request)
        ids = _ids(fields)
        reason = _first(fields, "reason") or None
        if _change(request, ("retry", "discard")) == "retry":
            retried = await run_in_threadpool(ops.retry_dead_letters, ids, reason=reason)
            # Back to the list with what happened: the new messages, and where to look.
            done = ",".join(r.message_id for r in retried)
            return self.back(request, fields, extra={"retried": done})
        else:
            await run_in_threadpool(ops.discard_dead_letters, ids, reason=reason)
        return self.back(request, fields)

    async def retry_effects(self, request: Request) -> Response:
        ops, fields = await self.form(request)
        reason = _first(fields, "reason") or None
        await run_in_threadpool(ops.retry_effects, _ids(fields), reason=reason)
        return self.back(request, fields)

    async def reminder_action(self, request: Request) -> Response:
        ops, fields = await self.form(request)
        change = {
            "pause": ops.pause_reminder,
            "resume": ops.resume_reminder,
            "cancel": ops.cancel_reminder,
            "run_now": ops.run_reminder_now,
        }[_change(request, ("pause", "resume", "cancel", "run_now"))]
        await run_in_threadpool(
            change,
            _first(fields, "actor_type"),
            _first(fields, "actor_id"),
            _first(fields, "operation"),
            _first(fields, "key"),
            reason=_first(fields, "reason") or None,
        )
        return self.back(request, fields)

    async def recover_process(self, request: Request) -> Response:
        ops, fields = await self.form(request)
        reason = _first(fields, "reason") or None
        await run_in_threadpool(ops.recover_process, _first(fields, "owner"), reason=reason)
        return self.back(request, fields)


def _change(request: Request, known: Sequence[str]) -> str:
    change = str(request.path_params["change"])
    if change not in known:
        raise NotFound(f"no such change: {change!r}")
    return change


def _first(fields: Mapping[str, list[str]], name: str) -> str:
    values = fields.get(name)
    return values[0] if values else ""


def _ids(fields: Mapping[str, list[str]]) -> list[str]:
    """One row's own button (``one``) wins over the ticked boxes (``ids``)."""
    one = _first(fields, "one")
    return [one] if one else list(fields.get("ids", []))


def _quote(value: str) -> str:
    return quote(value, safe="")


def _actor_status(a: Any) -> str:
    """What the actor is doing, in the on-call engineer's words (not just its flag)."""
    if a.paused:
        return "paused"
    if a.lease is not None and not a.lease.expired:
        return f"running (held by {a.lease.owner})"
    if a.waiting_for is not None:
        return f"waiting for a process that runs {a.waiting_for}"
    if a.retry_at is not None:
        return "backing off: the head message is retried later"
    if a.queued_total:
        return "waiting for a worker"
    if a.open_dead_letters:
        return "idle, with an open dead letter"
    return "idle"


def _raw_path(request: Request) -> str:
    """The path as the browser sent it, still quoted: ``request.url.path`` is decoded,
    so an actor id holding ``%2F``, ``?`` or ``#`` would not survive a round trip."""
    raw = request.scope.get("raw_path")
    return raw.decode("latin-1") if raw else quote(request.url.path)


def _next_url(request: Request, page: Any) -> str | None:
    if page is None or page.next_cursor is None:
        return None
    params = [(k, v) for k, v in request.query_params.multi_items() if k != "cursor"]
    return "?" + urlencode([*params, ("cursor", page.next_cursor)])


def _reminder_changes(
    ops: Administration, actor_type: str | None, actor_id: str | None
) -> Sequence[str]:
    """The reminder changes this principal may make (asked once, with the list's filters)."""
    target = {"actor_type": actor_type, "actor_id": actor_id}
    return [
        c
        for c in ("pause", "resume", "cancel", "run_now")
        if ops.allowed(f"reminders.{c}", **target)
    ]


def dashboard(
    runtime: Runtime,
    *,
    principal: Principal,
    secret: bytes | None = None,
) -> Starlette:
    """The operator dashboard of ``runtime`` as an ASGI app to serve or mount.

    ``principal(request)`` names who is asking (from the host's session, a header
    its proxy sets, ...); None answers 401. The application's administration
    policy (``runtime.admin.set_policy``) decides what each principal may see and
    do. ``secret`` keys the CSRF tokens; give every process behind one balancer
    the same one (default: random per app).
    """
    if not callable(principal):
        raise TypeError("principal is a callable principal(request) -> str | None")
    d = _Dashboard(runtime, principal, CsrfTokens(secret))
    routes = [
        Route("/", d.overview),
        Route("/activity", d.activity),
        Route("/actors", d.actors),
        # An actor id may hold "/" (``alice/notes``): the links quote it, the server
        # decodes the path, and the id is the rest of it (``:path``). The pause route
        # is POST only, so a GET of an id ending in "/pause" is the actor's page.
        Route("/actors/{actor_type}/{actor_id:path}", d.actor, methods=["GET", "HEAD"]),
        Route(
            "/actors/{actor_type}/{actor_id:path}/{change:str}",
            d.set_paused,
            methods=["POST"],
        ),
        Route("/dead-letters", d.dead_letters),
        Route("/dead-letters/{change:str}", d.dead_letter_action, methods=["POST"]),
        Route("/effects", d.effects),
        Route("/retrying", d.retrying),
        Route("/effects/retry", d.retry_effects, methods=["POST"]),
        Route("/reminders", d.reminders),
        Route("/reminders/{change:str}", d.reminder_action, methods=["POST"]),
        Route("/processes", d.processes),
        Route("/processes/recover", d.recover_process, methods=["POST"]),
        Route("/audit", d.audit),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return DashboardApp(
        routes=routes,
        exception_handlers={
            Anonymous: d.on_anonymous,
            CsrfRejected: d.on_csrf,
            Unauthorized: d.on_unauthorized,
            NotFound: d.on_not_found,
            InvalidArguments: d.on_invalid,
            OperationRefused: d.on_refused,
        },
    )
