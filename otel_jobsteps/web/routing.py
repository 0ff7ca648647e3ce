"""The route table of ``serve`` and its app factory: pages, ``/api/...``, ``/metrics`` and
``/static``, with the health paths and the security layer in front."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta

from starlette.applications import Starlette
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from .._http.health import SERVE_RIGHTS, HealthMiddleware, Readiness
from .._http.requestlog import RequestLog
from ..errors import ConfigurationError
from .actions import Operator, action_routes
from .auth import FailureLimiter
from .data import Reader
from .diff import DiffPages
from .endpoints import Endpoint, JobRoute, guarded
from .layout import TraceLinks
from .metrics import DEFAULT_SILENT_AFTER, metrics_page
from .overdue import BASELINE_WINDOW, DEFAULT_OVERDUE_FACTOR, MIN_SAMPLES, Baselines
from .pages import Pages
from .security import secure

__all__ = ["DEFAULT_REFRESH_S", "create_app"]

DEFAULT_REFRESH_S = 2.0


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
        return route(path, guarded(pages, endpoint, api=api), methods=["GET", "HEAD"])

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
