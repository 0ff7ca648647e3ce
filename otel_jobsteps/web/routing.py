"""The route table of ``serve`` and its app factory: pages, ``/api/...``, ``/metrics`` and
``/static``, with the health paths and the security layer in front."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from urllib.parse import unquote_to_bytes

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Scope

from .._http.health import SERVE_RIGHTS, HealthMiddleware, Readiness
from .._http.requestlog import RequestLog
from ..errors import ConfigurationError, DatabaseUnavailableError, SchemaNotMigratedError
from .actions import Operator, action_routes
from .auth import FailureLimiter
from .data import Reader
from .diff import DiffPages
from .layout import TraceLinks
from .metrics import DEFAULT_SILENT_AFTER, metrics_page
from .overdue import BASELINE_WINDOW, DEFAULT_OVERDUE_FACTOR, MIN_SAMPLES, Baselines
from .pages import Pages
from .parsing import check_text
from .rendering import json_response
from .security import raw_path, secure

__all__ = ["DEFAULT_REFRESH_S", "JobRoute", "create_app"]

logger = logging.getLogger("otel_jobsteps.web")

DEFAULT_REFRESH_S = 2.0

Endpoint = Callable[[Request], Response]


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
    metrics_max_series: int | None = None,
    failures: FailureLimiter | None = None,
    operator: Operator | None = None,
    overdue_factor: float = DEFAULT_OVERDUE_FACTOR,
    clock: Callable[[], float] = time.monotonic,
) -> ASGIApp:
    """The ASGI app of ``serve`` behind the security layer: ``token`` required but on the health
    paths (wrong ones slowed by ``failures``), only ``hosts`` answered, ``trace_url`` checked
    here, ``access_log`` a line a request, ``/metrics`` within ``metrics_max_series``;
    ``operator``: the action routes and buttons (web/actions.py); a running step is overdue
    past ``overdue_factor`` x its p99, read again every few minutes by ``clock`` (seconds)."""
    if not refresh_s > 0:
        raise ConfigurationError("refresh_s must be positive")
    links = TraceLinks(trace_url) if trace_url else None
    reader = Reader(dsn, schema=schema)
    baselines = Baselines(
        lambda: reader.step_baselines(BASELINE_WINDOW, MIN_SAMPLES), overdue_factor, clock=clock
    )
    pages = Pages(reader, links, refresh_s, baselines)
    pages.action_form = None if operator is None else operator.form
    more = () if operator is None else (operator.counter,)
    metrics = metrics_page(reader, silent_after, baselines, metrics_max_series, more)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        baselines.start()  # the first read of the baselines (seconds on a big table) begins
        yield

    app = Starlette(
        routes=[*action_routes(operator, pages), *routes(pages, metrics)], lifespan=lifespan
    )
    health = HealthMiddleware(app, Readiness(dsn, schema=schema, rights=SERVE_RIGHTS))
    operator_token = None if operator is None else operator.token
    secured = secure(health, token, hosts, failures, operator_token)
    return RequestLog(secured, name="serve", access_log=access_log)


def routes(pages: Pages, metrics: Endpoint) -> list[BaseRoute]:
    """Every path of ``serve`` but the health probes, GET and HEAD only."""

    def page(
        path: str, endpoint: Endpoint, *, api: bool = False, route: type[Route] = Route
    ) -> Route:
        return route(path, _guarded(pages, endpoint, api=api), methods=["GET", "HEAD"])

    diff = DiffPages(pages)
    return [
        page("/", pages.jobs),
        # before the job routes, which would read ".../diff" as the end of a job id
        page("/jobs/{domain}/{job_id}/diff", diff.page, route=JobRoute),
        page("/diff", diff.page),
        page("/api/jobs/{domain}/{job_id}/diff", diff.api, api=True, route=JobRoute),
        page("/api/diff", diff.api, api=True),
        page("/jobs/{domain}/{job_id}", pages.job, route=JobRoute),
        page("/job", pages.job),
        page("/running", pages.running),
        page("/steps", pages.steps),
        page("/steps/failures", pages.failures),
        page("/api/jobs", pages.api_jobs, api=True),
        page("/api/jobs/{domain}/{job_id}", pages.api_job, api=True, route=JobRoute),
        page("/api/job", pages.api_job, api=True),
        page("/api/running", pages.api_running, api=True),
        page("/api/steps", pages.api_steps, api=True),
        page("/metrics", metrics, api=True),
        Mount("/static", StaticFiles(packages=[("otel_jobsteps.web", "static")]), name="static"),
    ]


def _guarded(pages: Pages, endpoint: Endpoint, *, api: bool) -> Endpoint:
    """Errors of a request as answers: 400 for bad input, 503 while the database is away (the
    error page keeps refreshing, so it recovers on its own)."""

    def handle(request: Request) -> Response:
        try:
            check_text(request)
            return endpoint(request)
        except ConfigurationError as error:
            status, message = 400, str(error)
        except (DatabaseUnavailableError, SchemaNotMigratedError) as error:
            logger.warning("serve: %s", error)
            status, message = 503, str(error)
        if api:
            return json_response({"error": message}, status)
        return pages.render("error.html", status, status=status, message=message)

    return handle


class JobRoute(Route):
    """``PREFIX/{domain}/{job_id}[SUFFIX]`` matched on the undecoded path: a ``%2F`` stays in
    its segment, and the job id is the rest of the path before SUFFIX (``/jobs/d/a/b`` names
    job ``a/b``; ``/jobs/d/a%2Fdiff`` job ``a/diff``, whose page ``/jobs/d/a/diff`` is not)."""

    def __init__(self, path: str, endpoint: Endpoint, *, methods: list[str]) -> None:
        super().__init__(path, endpoint, methods=methods)
        prefix, sep, suffix = path.partition("{domain}/{job_id}")
        assert sep, "a JobRoute path has {domain}/{job_id}"
        self.prefix, self.suffix = prefix.encode("ascii"), suffix.encode("ascii")

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        raw = raw_path(scope) if scope["type"] == "http" else b""
        if not raw.startswith(self.prefix) or not raw.endswith(self.suffix):
            return Match.NONE, {}
        named = raw[len(self.prefix) : len(raw) - len(self.suffix)]
        domain, sep, job_id = named.partition(b"/")
        if not domain or not sep:
            return Match.NONE, {}
        params = {"domain": _unquote(domain), "job_id": _unquote(job_id)}
        child = {"endpoint": self.endpoint, "path_params": params}
        allowed = self.methods is None or scope["method"] in self.methods
        return (Match.FULL if allowed else Match.PARTIAL), child


def _unquote(raw: bytes) -> str:
    """A percent-encoded path part as text (invalid UTF-8 cannot name a job: replaced)."""
    return unquote_to_bytes(raw).decode("utf-8", "replace")
