"""The page and API handlers of ``serve``: each reads through one `Reader` and renders a
template or JSON. Errors become pages in `routing`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any, TypedDict
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from .._pg.step_stats import Thresholds, parse_thresholds
from ..errors import ConfigurationError
from .data import COUNT_CAP, JobPage, JobsPage, OpenStep, Reader, listed_counts
from .layout import Cursor, Timeline, TraceLinks, build_timeline, drawn_rows
from .overdue import Baselines
from .parsing import (
    MAX_ROW,
    PAGE_SIZE,
    attempt_param,
    before_attempt_param,
    integer_param,
    job_key,
    limit_param,
    status_param,
    tag_param,
    text_param,
    window_param,
)
from .rendering import environment, json_response

__all__ = ["FAILURES_WINDOW", "Pages"]

# The widest window of a /steps/failures link from /steps?window=all: over every row kept,
# that read would scan the whole table (no index leads with the job type).
FAILURES_WINDOW = "30d"
_EVERYTHING = timedelta(days=36500)  # the window "all" of the step reads
_NARROWING = ("domain", "type", "status", "q", "tag")  # the jobs filters that leave jobs out


class _Selection(TypedDict):
    """What a jobs page and a tag's jobs are read by."""

    domain: str | None
    job_type: str | None
    status: str | None
    since: timedelta | None
    cursor: Cursor | None
    limit: int


def _jobs_filters(request: Request, window: str) -> dict[str, str | None]:
    """The jobs page's filters as the page shows them and its links keep them."""
    return {
        "domain": text_param(request, "domain"),
        "type": text_param(request, "type"),
        "status": (request.query_params.get("status") or "").lower(),
        "window": window,
        "q": text_param(request, "q"),
        "tag": text_param(request, "tag"),
        "live": "1" if request.query_params.get("live") == "1" else None,
    }


def _page_url(kept: dict[str, str], cursor: Cursor, trail: list[Cursor]) -> str:
    """The jobs page below ``cursor``, remembering the cursors of the pages above (``back``)."""
    query = [*kept.items(), *cursor.query().items(), *(("back", c.token()) for c in trail)]
    return "/?" + urlencode(query)


class Pages:
    """The pages and the API over one `Reader`."""

    def __init__(
        self, reader: Reader, links: TraceLinks | None, refresh_s: float, overdue: Baselines
    ) -> None:
        self.reader = reader
        self.overdue = overdue  # the limits past which a running step is overdue
        self.links = links
        self.refresh_ms = int(refresh_s * 1000)
        self.env = environment()
        # The job page's action forms for this request, or None (no buttons): web/actions.py
        self.action_form: Callable[[Request, str, str], dict[str, str] | None] | None = None

    def render(self, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        # now: what the relative times of pages without a database clock count from
        context.setdefault("now", datetime.now(timezone.utc))
        html = self.env.get_template(name).render(refresh_ms=self.refresh_ms, **context)
        return HTMLResponse(html, status_code=status_code)

    def jobs(self, request: Request) -> Response:
        window_name, window = window_param(request, "window", "all")
        filters = _jobs_filters(request, window_name)
        limit = limit_param(request)
        cursor = Cursor.parse(dict(request.query_params))
        trail = Cursor.parse_trail(request.query_params.getlist("back"))
        page = self._read_jobs(request, filters, tag_param(request), (window, cursor, limit))
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
        # A filtered list counts what it lists; the fleet's counts would ignore the filter.
        narrowed = any(filters[name] for name in _NARROWING)
        return self.render(
            "jobs.html",
            page=page,
            filters=filters,
            counts=listed_counts(page.jobs) if narrowed else self.reader.status_counts(window),
            listed_counts=narrowed,
            count_cap=COUNT_CAP,
            next_url=older_url,
            newer_url=newer_url,
            paged=cursor is not None,
            first_url=newest_url,
            live=filters["live"] is not None,
        )

    def _read_jobs(
        self,
        request: Request,
        filters: dict[str, str | None],
        tag: tuple[str, str] | None,
        where: tuple[timedelta | None, Cursor | None, int],
    ) -> JobsPage:
        """The jobs page's read: an id search, the jobs of a tag, or the latest jobs."""
        since, cursor, limit = where
        domain, query = filters["domain"], filters["q"]
        if query:
            return self.reader.find_jobs(query, domain=domain, cursor=cursor, limit=limit)
        chosen: _Selection = {
            "domain": domain,
            "job_type": filters["type"],
            "status": status_param(request),
            "since": since,
            "cursor": cursor,
            "limit": limit,
        }
        if tag is not None:
            return self.reader.tagged_jobs(tag, **chosen)
        return self.reader.jobs_page(**chosen)

    def job(self, request: Request) -> Response:
        domain, job_id = job_key(request)
        chosen, step = attempt_param(request), text_param(request, "step")
        first = integer_param(request, "from", MAX_ROW)
        before = before_attempt_param(request)

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
            domain,
            job_id,
            lambda read: drawn_rows(lay_out(read)),
            attempt=chosen,
            step=step,
            before_attempt=before,
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
            gaps={gap.before: gap.count for gap in page.attempt_gaps},
            kept={} if chosen is None else {"attempt": str(chosen)},
            actions=self.action_form and self.action_form(request, domain, job_id),
        )

    def running(self, request: Request) -> Response:
        silent_name, silent = window_param(request, "silent", "all")
        steps = self._open_steps(silent, request)
        return self.render(
            "running.html",
            overdue_factor=self.overdue.factor,
            steps=steps,
            as_of=steps[0].as_of if steps else None,
            silent=silent_name,
            total=steps[0].total if steps else 0,
        )

    def steps(self, request: Request) -> Response:
        window_name, window = window_param(request, "window", "24h")
        thresholds = _by_version(request)
        if thresholds is not None:
            return self.render(
                "steps.html",
                versions=self.reader.step_versions(window or _EVERYTHING, thresholds),
                thresholds=thresholds,
                window=window_name,
            )
        stats = self.reader.step_stats(window or _EVERYTHING)
        tax = self.reader.retry_tax(window or _EVERYTHING)
        failures_window = window_name if window is not None else FAILURES_WINDOW
        return self.render(
            "steps.html",
            stats=stats,
            tax=tax,
            window=window_name,
            failures_window=failures_window,
        )

    def failures(self, request: Request) -> Response:
        window_name, window = window_param(request, "window", "24h")
        key = request.query_params.get("key")
        if not key:
            raise ConfigurationError("key (the step key) is required")
        job_type = text_param(request, "type")
        found = self.reader.step_failures(
            job_type, key, window or _EVERYTHING, limit_param(request)
        )
        return self.render(
            "failures.html", failures=found, key=key, job_type=job_type, window=window_name
        )

    # -- JSON API --------------------------------------------------------------------------

    def api_jobs(self, request: Request) -> Response:
        # Bounded by default: "all" computes the latest attempt of every job kept.
        _, window = window_param(request, "window", "24h")
        tag = tag_param(request)
        if tag is not None:
            return self._api_tagged_jobs(request, tag, window)
        jobs = self.reader.list_jobs(
            domain=text_param(request, "domain"),
            job_type=text_param(request, "type"),
            status=status_param(request),
            since=window,
            limit=limit_param(request),
        )
        return json_response(jobs)

    def _api_tagged_jobs(
        self, request: Request, tag: tuple[str, str], window: timedelta | None
    ) -> Response:
        """A page of tagged jobs as JSON; the next page's URL is in a ``Link: rel="next"``
        header (the body stays a list)."""
        page = self.reader.tagged_jobs(
            tag,
            domain=text_param(request, "domain"),
            job_type=text_param(request, "type"),
            status=status_param(request),
            since=window,
            cursor=Cursor.parse(dict(request.query_params)),
            limit=limit_param(request),
        )
        response = json_response([job.to_dict() for job in page.jobs])
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
        detail = self.reader.job_detail(
            *job_key(request), attempt_param(request), before_attempt_param(request)
        )
        if detail is None:
            return json_response({"error": "no such job or attempt"}, 404)
        return json_response(detail)

    def api_running(self, request: Request) -> Response:
        _, silent = window_param(request, "silent", "all")
        return json_response(self._open_steps(silent, request))

    def _open_steps(self, silent: timedelta | None, request: Request) -> list[OpenStep]:
        """/running's steps, silent for ``silent`` or more, each overdue or not."""
        limits = self.overdue.limits()
        return self.reader.open_steps(silent or timedelta(0), limit_param(request), limits)

    def api_steps(self, request: Request) -> Response:
        _, window = window_param(request, "window", "24h")
        thresholds = _by_version(request)
        if thresholds is not None:
            return json_response(self.reader.step_versions(window or _EVERYTHING, thresholds))
        return json_response(self.reader.step_stats(window or _EVERYTHING))


def _by_version(request: Request) -> Thresholds | None:
    """``?by=version``'s thresholds (``p95_factor``, ``failure_points``, ``min_samples``), None
    without ``by``; any other ``by`` is a 400."""
    named = request.query_params
    by = named.get("by")
    if not by:
        return None
    if by != "version":
        raise ConfigurationError(f"by must be version, got {by[:40]!r}")
    return parse_thresholds(
        named.get("p95_factor"), named.get("failure_points"), named.get("min_samples")
    )
