"""``otel-jobsteps serve``: the recorded jobs as web pages and JSON, read-only.

Server-rendered HTML (Jinja2, autoescaped) on starlette; the only script is ``static/live.js``,
which refreshes a page that shows something running. Every response carries a strict
Content-Security-Policy: scripts, styles and images from this origin only, nothing inline, so
text from job code can only ever be text. Binding anywhere but loopback needs a token (or an
explicit ``--no-auth``).
"""

from __future__ import annotations

import hmac
import json
import logging
import re
from collections.abc import Callable, MutableMapping
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote, unquote, unquote_to_bytes, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Match, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from .._db import Record, redact
from .._formatting import (
    format_ago,
    format_duration,
    format_time,
    format_utc,
    severity_word,
    shorten,
)
from .._health import SERVE_RIGHTS, HealthMiddleware, Readiness, is_health_request
from .._listen import check_free, parse_listen
from .._loopback import is_loopback, loopback_hosts, refused_host
from .._requestlog import RequestLog
from .._vocabulary import MAX_ATTEMPT
from ..errors import ConfigurationError, DatabaseUnavailableError, SchemaNotMigratedError
from ..query import STATUSES, parse_tag
from .data import COUNT_CAP, JobPage, Reader
from .layout import WINDOWS, Cursor, Timeline, TraceLinks, build_timeline, drawn_rows
from .metrics import DEFAULT_SILENT_AFTER, metrics_page

__all__ = [
    "CSP",
    "DEFAULT_LISTEN",
    "TOKEN_ENV",
    "check_exposure",
    "create_app",
    "is_loopback",
    "job_url",
    "loopback_hosts",
    "serve",
]

logger = logging.getLogger("otel_jobsteps.web")

DEFAULT_LISTEN = "127.0.0.1:8080"
TOKEN_ENV = "OTEL_JOBSTEPS_WEB_TOKEN"
TOKEN_COOKIE = "otel_jobsteps_token"
PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
# The widest window of a /steps/failures link from /steps?window=all: over every row kept,
# that read would scan the whole table (no index leads with the job type).
FAILURES_WINDOW = "30d"
DEFAULT_REFRESH_S = 2.0
MAX_ROW = 10**9  # ``from``, the first row of an attempt to draw
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}
_STATUS_WORDS = {s.lower(): s for s in STATUSES}
# Path segments a browser (or proxy) drops or resolves away, %2E spellings included.
_FRAGILE_SEGMENTS = {"", ".", ".."}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_INTEGER = re.compile(r"[0-9]{1,10}")  # ASCII digits only; a length int() takes at once


def check_exposure(host: str, token: str | None, no_auth: bool) -> None:
    """Refuse to listen beyond loopback without a token unless the operator said ``--no-auth``."""
    if token is not None and not token.strip():
        raise ConfigurationError("the web token must not be empty")
    if token and no_auth:
        raise ConfigurationError("--token and --no-auth exclude each other")
    if not is_loopback(host) and not token and not no_auth:
        raise ConfigurationError(
            f"listening on {host} exposes the jobs beyond this machine: pass --token "
            f"(or set {TOKEN_ENV}) or, deliberately, --no-auth"
        )


# -- rendering helpers -------------------------------------------------------------------------


def job_url(
    domain: str, job_id: str, attempt: int | None = None, step: str | None = None, **more: str
) -> str:
    """The permalink of a job: ``/jobs/{domain}/{job_id}``, each part one percent-encoded segment
    (ids come from job code; a ``/`` in them is ``%2F``). A part a browser would normalise away
    (``.``, ``..``, also as ``%2E``; or empty) takes the query form ``/job?domain=&job_id=``.
    ``attempt`` and ``step`` select an attempt and one of its steps; ``more`` goes in the query."""
    query = {} if attempt is None else {"attempt": str(attempt)}
    if step is not None:
        query["step"] = step
    query.update(more)
    domain_part, id_part = quote(domain, safe=""), quote(job_id, safe="")
    if domain_part in _FRAGILE_SEGMENTS or id_part in _FRAGILE_SEGMENTS:
        return "/job?" + urlencode({"domain": domain, "job_id": job_id, **query})
    return f"/jobs/{domain_part}/{id_part}" + ("?" + urlencode(query) if query else "")


def compact_json(value: Any) -> str:
    """A detail object as one line of JSON (the template escapes it)."""
    return "" if value is None else json.dumps(value, ensure_ascii=False, default=str)


def since_text(at: datetime | None, as_of: datetime) -> str:
    """How long ago ``at`` was, at the time of the read."""
    return "-" if at is None else format_duration(max(as_of - at, timedelta(0)))


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("otel_jobsteps.web", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        duration=format_duration,
        time=format_time,
        json=compact_json,
        iso=lambda value: value.isoformat() if value else "",
        utc=format_utc,
        seconds=lambda value: format_duration(timedelta(seconds=value)),
        shorten=shorten,
        severity=lambda value: severity_word(value).lower(),
    )
    env.globals.update(job_url=job_url, since=since_text, ago=format_ago, windows=list(WINDOWS))
    return env


# -- requests ----------------------------------------------------------------------------------


def _window(request: Request, name: str, default: str) -> tuple[str, timedelta | None]:
    text = request.query_params.get(name) or default
    if text not in WINDOWS:
        raise ConfigurationError(f"{name} must be one of {', '.join(WINDOWS)}, got {text!r}")
    return text, WINDOWS[text]


def _status(request: Request) -> str | None:
    text = (request.query_params.get("status") or "").lower()
    if text and text not in _STATUS_WORDS:
        raise ConfigurationError(f"status must be one of {', '.join(_STATUS_WORDS)}")
    return _STATUS_WORDS.get(text)


def _integer(request: Request, name: str, high: int) -> int | None:
    """Query parameter ``name`` as an integer from 1 to ``high``, None when absent or empty."""
    text = request.query_params.get(name)
    if not text:
        return None
    if not _INTEGER.fullmatch(text) or not 1 <= int(text) <= high:
        raise ConfigurationError(f"{name} must be an integer from 1 to {high}")
    return int(text)


def _limit(request: Request) -> int:
    return _integer(request, "limit", MAX_PAGE_SIZE) or PAGE_SIZE


def _text(request: Request, name: str) -> str | None:
    return request.query_params.get(name) or None


def _tag(request: Request) -> tuple[str, str] | None:
    """``?tag=NAME:VALUE`` as (name, value), None when absent or empty."""
    text = _text(request, "tag")
    return None if text is None else parse_tag(text, ":")


def _attempt(request: Request) -> int | None:
    return _integer(request, "attempt", MAX_ATTEMPT)


def _check_text(request: Request) -> None:
    """No parameter or path part may hold a NUL: PostgreSQL text cannot store one, so it names
    nothing, and the driver would refuse to send it."""
    named = [*request.query_params.multi_items(), *request.path_params.items()]
    for name, value in named:
        if "\x00" in name or "\x00" in value:
            raise ConfigurationError(f"{name!r} must not contain a NUL character")


def _job_key(request: Request) -> tuple[str, str]:
    """The domain and job id a request names: path parameters, or the query of ``/job``."""
    named = request.path_params or request.query_params
    domain, job_id = named.get("domain"), named.get("job_id")
    if domain is None or job_id is None:
        raise ConfigurationError("domain and job_id are required")
    return domain, job_id


def _raw_path(scope: Scope) -> bytes:
    """The request path as sent, still percent-encoded (``raw_path`` is optional in ASGI)."""
    raw: bytes | None = scope.get("raw_path")
    return raw if raw is not None else quote(scope["path"]).encode("ascii")


def _local_path(raw: str) -> str:
    """``raw`` if a browser reads it as a path on this origin, else ``/``. As sent and at every
    percent-decoding (a proxy may decode once more) it starts with one ``/`` not followed by ``/``
    or ``\\`` (browsers read ``/\\`` as ``//``) and holds no control character (browsers drop
    tabs and newlines, so ``/<tab>/host`` is ``//host``)."""
    text, previous = raw, None
    while text != previous:
        if not text.startswith("/") or text[1:2] in ("/", "\\") or _CONTROL.search(text):
            return "/"
        text, previous = unquote(text), text
    return raw


def _json(value: Any, status_code: int = 200) -> JSONResponse:
    if isinstance(value, Record):
        value = value.to_dict()
    elif isinstance(value, list):
        value = [item.to_dict() if isinstance(item, Record) else item for item in value]
    return JSONResponse(value, status_code=status_code)


def _page_url(kept: dict[str, str], cursor: Cursor, trail: list[Cursor]) -> str:
    """The jobs page below ``cursor``, remembering the cursors of the pages above (``back``)."""
    query = [*kept.items(), *cursor.query().items(), *(("back", c.token()) for c in trail)]
    return "/?" + urlencode(query)


class WebApp:
    """The pages and the API over one `Reader`."""

    def __init__(self, reader: Reader, links: TraceLinks | None, refresh_s: float) -> None:
        self.reader = reader
        self.links = links
        self.refresh_ms = int(refresh_s * 1000)
        self.env = _environment()

    def render(self, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        # now: what the relative times of pages without a database clock count from
        context.setdefault("now", datetime.now(timezone.utc))
        html = self.env.get_template(name).render(refresh_ms=self.refresh_ms, **context)
        return HTMLResponse(html, status_code=status_code)

    def jobs(self, request: Request) -> Response:
        window_name, window = _window(request, "window", "all")
        filters = {
            "domain": _text(request, "domain"),
            "type": _text(request, "type"),
            "status": (request.query_params.get("status") or "").lower(),
            "window": window_name,
            "q": _text(request, "q"),
            "tag": _text(request, "tag"),
            "live": "1" if request.query_params.get("live") == "1" else None,
        }
        limit = _limit(request)
        cursor = Cursor.parse(dict(request.query_params))
        trail = Cursor.parse_trail(request.query_params.getlist("back"))
        tag = _tag(request)
        if filters["q"]:
            page = self.reader.find_jobs(
                filters["q"], domain=filters["domain"], cursor=cursor, limit=limit
            )
        elif tag is not None:
            page = self.reader.tagged_jobs(
                tag,
                domain=filters["domain"],
                job_type=filters["type"],
                status=_status(request),
                since=window,
                cursor=cursor,
                limit=limit,
            )
        else:
            page = self.reader.jobs_page(
                domain=filters["domain"],
                job_type=filters["type"],
                status=_status(request),
                since=window,
                cursor=cursor,
                limit=limit,
            )
        kept = {k: v for k, v in filters.items() if v and not (k == "window" and v == "all")}
        if limit != PAGE_SIZE:
            kept["limit"] = str(limit)
        newest_url = "/?" + urlencode(kept)
        older_url = newer_url = None
        if page.next_cursor is not None:
            back = [*trail, cursor] if cursor is not None else []
            older_url = _page_url(kept, page.next_cursor, back)
        if cursor is not None:
            newer_url = _page_url(kept, trail[-1], trail[:-1]) if trail else newest_url
        return self.render(
            "jobs.html",
            page=page,
            filters=filters,
            counts=self.reader.status_counts(window),
            count_cap=COUNT_CAP,
            next_url=older_url,
            newer_url=newer_url,
            paged=cursor is not None,
            first_url=newest_url,
            live=filters["live"] is not None,
        )

    def job(self, request: Request) -> Response:
        domain, job_id = _job_key(request)
        chosen, step = _attempt(request), _text(request, "step")
        first = _integer(request, "from", MAX_ROW)

        def lay_out(page: JobPage) -> Timeline:
            return build_timeline(
                page.attempts,
                page.rows,
                page.logs,
                page.as_of,
                self.links,
                attempt=chosen,
                step=step,
                first=None if first is None else first - 1,
                lines=page.lines,
            )

        # laid out twice: once to know which rows it draws, once with their details
        page = self.reader.job_page(
            domain, job_id, lambda read: drawn_rows(lay_out(read)), attempt=chosen, step=step
        )
        if page is None:
            return self.render("missing.html", 404, domain=domain, job_id=job_id)
        timeline = lay_out(page)
        if timeline.selected is None:
            return self.render("missing.html", 404, domain=domain, job_id=job_id, attempt=chosen)
        started = timeline.lanes[0].summary.started_at
        latest_end = timeline.lanes[-1].summary.ended_at
        total = (latest_end or page.as_of) - started if started else None
        return self.render(
            "job.html",
            page=page,
            timeline=timeline,
            selected=timeline.selected,
            latest=timeline.lanes[-1],
            total=total,
            stalled=sum(lane.summary.stalled_count for lane in timeline.lanes),
        )

    def running(self, request: Request) -> Response:
        silent_name, silent = _window(request, "silent", "all")
        steps = self.reader.open_steps(silent or timedelta(0), _limit(request))
        return self.render(
            "running.html",
            steps=steps,
            as_of=steps[0].as_of if steps else None,
            silent=silent_name,
            total=steps[0].total if steps else 0,
        )

    def steps(self, request: Request) -> Response:
        window_name, window = _window(request, "window", "24h")
        stats = self.reader.step_stats(window or timedelta(days=36500))
        failures_window = window_name if window is not None else FAILURES_WINDOW
        return self.render(
            "steps.html", stats=stats, window=window_name, failures_window=failures_window
        )

    def failures(self, request: Request) -> Response:
        window_name, window = _window(request, "window", "24h")
        key = request.query_params.get("key")
        if not key:
            raise ConfigurationError("key (the step key) is required")
        job_type = _text(request, "type")
        found = self.reader.step_failures(
            job_type, key, window or timedelta(days=36500), _limit(request)
        )
        return self.render(
            "failures.html", failures=found, key=key, job_type=job_type, window=window_name
        )

    # -- JSON API --------------------------------------------------------------------------

    def api_jobs(self, request: Request) -> Response:
        # Bounded by default: "all" computes the latest attempt of every job kept.
        _, window = _window(request, "window", "24h")
        tag = _tag(request)
        if tag is not None:
            return self._api_tagged_jobs(request, tag, window)
        jobs = self.reader.list_jobs(
            domain=_text(request, "domain"),
            job_type=_text(request, "type"),
            status=_status(request),
            since=window,
            limit=_limit(request),
        )
        return _json(jobs)

    def _api_tagged_jobs(
        self, request: Request, tag: tuple[str, str], window: timedelta | None
    ) -> Response:
        """A page of tagged jobs as JSON; the next page's URL is in a ``Link: rel="next"``
        header (the body stays a list)."""
        page = self.reader.tagged_jobs(
            tag,
            domain=_text(request, "domain"),
            job_type=_text(request, "type"),
            status=_status(request),
            since=window,
            cursor=Cursor.parse(dict(request.query_params)),
            limit=_limit(request),
        )
        response = _json([job.to_dict() for job in page.jobs])
        if page.next_cursor is not None:
            kept = [
                (k, v)
                for k, v in request.query_params.multi_items()
                if k not in ("before", "before_domain", "before_job")
            ]
            query = urlencode([*kept, *page.next_cursor.query().items()])
            response.headers["link"] = f'</api/jobs?{query}>; rel="next"'
        return response

    def api_job(self, request: Request) -> Response:
        detail = self.reader.job_detail(*_job_key(request), _attempt(request))
        if detail is None:
            return _json({"error": "no such job or attempt"}, 404)
        return _json(detail)

    def api_running(self, request: Request) -> Response:
        _, silent = _window(request, "silent", "all")
        return _json(self.reader.open_steps(silent or timedelta(0), _limit(request)))

    def api_steps(self, request: Request) -> Response:
        _, window = _window(request, "window", "24h")
        return _json(self.reader.step_stats(window or timedelta(days=36500)))


Endpoint = Callable[[Request], Response]


def _guarded(web: WebApp, endpoint: Endpoint, *, api: bool) -> Callable[[Request], Response]:
    """Turn the errors of a request into pages: 400 for bad input, 503 while the database is
    away (the error page keeps refreshing, so it recovers on its own)."""

    def handle(request: Request) -> Response:
        try:
            _check_text(request)
            return endpoint(request)
        except ConfigurationError as error:
            status, message = 400, str(error)
        except (DatabaseUnavailableError, SchemaNotMigratedError) as error:
            logger.warning("serve: %s", error)
            status, message = 503, str(error)
        if api:
            return _json({"error": message}, status)
        return web.render("error.html", status, status=status, message=message)

    return handle


class SecurityMiddleware:
    """Security headers on every response; with a token, every request must carry it (bearer
    header, or the cookie a ``?token=`` visit sets). With ``hosts``, a request naming another
    Host is refused: a page elsewhere cannot reach a loopback server by DNS rebinding."""

    def __init__(self, app: ASGIApp, token: str | None, hosts: frozenset[str] | None) -> None:
        self.app = app
        self.token = token
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        request = Request(scope)
        needs_token = self.token and not is_health_request(scope)
        response = self._authenticate(request) if needs_token else None
        refused = refused_host(request.headers.get("host", ""), self.hosts)
        response = refused if refused is not None else response
        if response is not None:
            await response(scope, receive, send_with_headers)
        else:
            await self.app(scope, receive, send_with_headers)

    def _authenticate(self, request: Request) -> Response | None:
        assert self.token is not None
        given = request.query_params.get("token")
        if given is not None and _same(given, self.token):
            # Move the token from the URL (history, logs, Referer) into an HttpOnly cookie.
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = _local_path(_raw_path(request.scope).decode("latin-1")) + (
                "?" + urlencode(rest) if rest else ""
            )
            redirect = RedirectResponse(target, status_code=303)
            redirect.set_cookie(
                TOKEN_COOKIE,
                self.token,
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
            return redirect
        header = request.headers.get("authorization", "")
        bearer = header[7:] if header.lower().startswith("bearer ") else None
        for candidate in (bearer, request.cookies.get(TOKEN_COOKIE)):
            if candidate is not None and _same(candidate, self.token):
                return None
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": "authentication required"}, status_code=401)
        return HTMLResponse(
            "<!doctype html><title>401</title><p>Authentication required: open this page "
            "once with <code>?token=…</code> or send <code>Authorization: Bearer …</code>.</p>",
            status_code=401,
        )


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


class JobRoute(Route):
    """``PREFIX/{domain}/{job_id}`` matched on the undecoded path: a ``%2F`` stays inside its
    segment and any character (CR/LF too) may appear. The job id is the rest of the path, so
    ``/jobs/d/a/b`` still names job ``a/b``."""

    def __init__(self, path: str, endpoint: Endpoint, *, methods: list[str]) -> None:
        super().__init__(path, endpoint, methods=methods)
        prefix, sep, _ = path.partition("{domain}/{job_id}")
        assert sep, "a JobRoute path ends with {domain}/{job_id}"
        self.prefix = prefix.encode("ascii")

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        raw = _raw_path(scope) if scope["type"] == "http" else b""
        if not raw.startswith(self.prefix):
            return Match.NONE, {}
        domain, sep, job_id = raw.removeprefix(self.prefix).partition(b"/")
        if not domain or not sep:
            return Match.NONE, {}
        params = {"domain": _unquote(domain), "job_id": _unquote(job_id)}
        child = {"endpoint": self.endpoint, "path_params": params}
        allowed = self.methods is None or scope["method"] in self.methods
        return (Match.FULL if allowed else Match.PARTIAL), child


def _unquote(raw: bytes) -> str:
    """A percent-encoded path part as text (invalid UTF-8 cannot name a job: replaced)."""
    return unquote_to_bytes(raw).decode("utf-8", "replace")


def create_app(
    dsn: str,
    *,
    schema: str = "public",
    trace_url: str | None = None,
    token: str | None = None,
    refresh_s: float = DEFAULT_REFRESH_S,
    hosts: frozenset[str] | None = None,
    silent_after: timedelta = DEFAULT_SILENT_AFTER,
    access_log: bool = False,
) -> ASGIApp:
    """The ASGI app of ``serve``: pages, ``/api/...``, ``/static``, ``/healthz`` and ``/readyz``
    behind the security layer (the two health paths need no token).

    ``trace_url`` is validated here (http or https only); ``token``, if given, is required on
    every request; ``hosts``, if given, are the only Host header names answered;
    ``access_log`` writes a line per request.
    """
    if not refresh_s > 0:
        raise ConfigurationError("refresh_s must be positive")
    links = TraceLinks(trace_url) if trace_url else None
    web = WebApp(Reader(dsn, schema=schema), links, refresh_s)

    def page(
        path: str, endpoint: Endpoint, *, api: bool = False, route: type[Route] = Route
    ) -> Route:
        return route(path, _guarded(web, endpoint, api=api), methods=["GET", "HEAD"])

    routes = [
        page("/", web.jobs),
        page("/jobs/{domain}/{job_id}", web.job, route=JobRoute),
        page("/job", web.job),
        page("/running", web.running),
        page("/steps", web.steps),
        page("/steps/failures", web.failures),
        page("/api/jobs", web.api_jobs, api=True),
        page("/api/jobs/{domain}/{job_id}", web.api_job, api=True, route=JobRoute),
        page("/api/job", web.api_job, api=True),
        page("/api/running", web.api_running, api=True),
        page("/api/steps", web.api_steps, api=True),
        page("/metrics", metrics_page(web.reader, silent_after), api=True),
        Mount("/static", StaticFiles(packages=[("otel_jobsteps.web", "static")]), name="static"),
    ]
    readiness = Readiness(dsn, schema=schema, rights=SERVE_RIGHTS)
    pages = HealthMiddleware(Starlette(routes=routes), readiness)
    return RequestLog(SecurityMiddleware(pages, token, hosts), name="serve", access_log=access_log)


def serve(
    dsn: str,
    *,
    listen: str = DEFAULT_LISTEN,
    schema: str = "public",
    trace_url: str | None = None,
    token: str | None = None,
    no_auth: bool = False,
    access_log: bool = False,
    announce: Callable[[str], None] | None = None,
    silent_after: timedelta = DEFAULT_SILENT_AFTER,
) -> None:
    """Run the web page until interrupted (uvicorn). Checks the listen address first."""
    import uvicorn

    host, port = parse_listen(listen, example=DEFAULT_LISTEN)
    check_exposure(host, token, no_auth)
    check_free(host, port)
    # Without a token, a loopback server answers loopback names only (DNS rebinding).
    hosts = loopback_hosts(host) if is_loopback(host) and not token else None
    app = create_app(
        dsn,
        schema=schema,
        trace_url=trace_url,
        token=token,
        hosts=hosts,
        silent_after=silent_after,
        access_log=access_log,
    )
    shown = f"[{host}]" if ":" in host else host
    if announce is not None:
        layout = Readiness(dsn, schema=schema, rights=SERVE_RIGHTS).layout()
        announce(
            f"serving http://{shown}:{port}/ (database {redact(dsn)}, schema {schema!r},"
            f" layout {layout})"
        )
    uvicorn.run(app, host=host, port=port, log_level="warning", server_header=False)
