"""What the pages draw, computed from rows: the waterfall's geometry, trace links, paging cursors.

Pure functions and frozen dataclasses, no I/O: the templates only print these values."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote, urlsplit

from .._cli.formatting import format_duration
from .._core.vocabulary import LOG, STEP, TAG
from ..errors import ConfigurationError
from ..query import AttemptSummary, JobLogEntry, LogLine

__all__ = [
    "AXIS_WIDTH",
    "WINDOWS",
    "Bar",
    "Cursor",
    "Lane",
    "Mark",
    "Progress",
    "Timeline",
    "TraceLinks",
    "build_timeline",
    "drawn_rows",
    "progress_of",
]

AXIS_WIDTH = 1000.0
"""Width of the time axis in SVG user units; bars are placed in these units."""
MIN_BAR_WIDTH = 2.0  # a step of a microsecond stays visible
TICKS = 5
COLLAPSE_OVER = 100
"""An earlier attempt with more rows than this is drawn collapsed unless it is selected."""
ROWS_SHOWN = 200
"""At most this many rows of one attempt are drawn at once (a window around the selection):
a job of 10,000 steps must not put 10,000 bars in the page."""
WINDOWS: dict[str, timedelta | None] = {
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
    "all": None,
}
"""The time windows the filters offer, by their URL value."""
TRAIL = 20  # the pages above the one shown that its Newer links can go back through
PLACEHOLDERS = ("{trace_id}", "{span_id}", "{start_ms}", "{end_ms}")
_HEX = re.compile(r"[0-9a-f]+")


class TraceLinks:
    """Links to a trace viewer from an http(s) URL template holding `PLACEHOLDERS` (plain
    replacement: JSON braces stay); ids that are not lowercase hex of OTel sizes give no link."""

    def __init__(self, template: str) -> None:
        parts = urlsplit(template)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigurationError("the trace URL template must be an http:// or https:// URL")
        if "{trace_id}" not in template:
            raise ConfigurationError("the trace URL template must contain {trace_id}")
        self.template = template

    def link(
        self, trace_id: str | None, span_id: str | None, start: datetime, end: datetime
    ) -> str | None:
        """The URL for a span (or, with no span id, the whole trace) over ``start``..``end``."""
        if not _is_hex(trace_id, 32) or (span_id is not None and not _is_hex(span_id, 16)):
            return None
        values = {
            "{trace_id}": str(trace_id),
            "{span_id}": span_id or "",
            "{start_ms}": str(int(start.timestamp() * 1000)),
            "{end_ms}": str(int(end.timestamp() * 1000) + 1),
        }
        url = self.template
        for name, value in values.items():
            url = url.replace(name, quote(value, safe=""))
        return url


def _is_hex(value: str | None, length: int) -> bool:
    return value is not None and len(value) == length and bool(_HEX.fullmatch(value))


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where the next page of jobs starts: below activity time ``at`` (inclusive), or below the
    job named (exclusive); an id search's cursor has no time, only the job it follows."""

    at: datetime | None
    domain: str | None = None
    job_id: str | None = None

    def query(self) -> dict[str, str]:
        """The cursor as URL query parameters."""
        found = {} if self.at is None else {"before": self.at.isoformat()}
        if self.domain is not None and self.job_id is not None:
            found.update(before_domain=self.domain, before_job=self.job_id)
        return found

    def token(self) -> str:
        """The cursor as one URL value (``back``: the pages above the one shown)."""
        at = None if self.at is None else self.at.isoformat()
        return json.dumps([at, self.domain, self.job_id], ensure_ascii=False)

    @classmethod
    def parse_trail(cls, tokens: list[str]) -> list[Cursor]:
        """The cursors of `token` values, oldest page first, at most `TRAIL` of them (the
        newest kept: a Newer link past them goes to the first page)."""
        trail = []
        for token in tokens[-TRAIL:]:
            try:
                at, domain, job_id = json.loads(token)
            except (ValueError, TypeError):
                raise ConfigurationError("back must be a cursor of this page") from None
            params = {"before": at, "before_domain": domain, "before_job": job_id}
            found = cls.parse({k: v for k, v in params.items() if isinstance(v, str)})
            if found is None:
                raise ConfigurationError("back must be a cursor of this page")
            trail.append(found)
        return trail

    @classmethod
    def parse(cls, params: dict[str, str]) -> Cursor | None:
        """The cursor in URL query parameters, None for the first page; `ConfigurationError`
        when ``before`` is not an ISO 8601 time with its offset."""
        text = params.get("before")
        domain, job_id = params.get("before_domain"), params.get("before_job")
        has_job = domain is not None and job_id is not None
        if not text:
            return cls(None, domain, job_id) if has_job else None
        try:
            at = datetime.fromisoformat(text)
        except ValueError:
            raise ConfigurationError("before must be an ISO 8601 time") from None
        if at.tzinfo is None:
            raise ConfigurationError("before must carry its UTC offset")
        return cls(at, domain, job_id) if has_job else cls(at)


@dataclass(frozen=True, slots=True)
class Progress:
    """A progress bar: ``value`` of ``maximum``, and its text (``40%``, ``3 / 10``)."""

    value: float
    maximum: float
    text: str


def _number(value: object) -> float | None:
    """A finite float of a JSON number; None for anything else, an int past a float included."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # job code's 10**400
            return None
        return number if math.isfinite(number) else None
    return None


def progress_of(detail: dict[str, Any] | None) -> Progress | None:
    """The bar a detail asks for: a numeric ``pct`` from 0 to 100, else ``progress`` of a
    positive ``total`` (``{"progress": 3, "total": 10}``); None for anything else."""
    if not isinstance(detail, dict):
        return None
    pct = _number(detail.get("pct"))
    if pct is not None and 0 <= pct <= 100:
        return Progress(pct, 100.0, f"{pct:g}%")
    done, total = _number(detail.get("progress")), _number(detail.get("total"))
    if done is not None and total is not None and 0 <= done <= total and total > 0:
        return Progress(done, total, f"{done:g} / {total:g}")
    return None


@dataclass(frozen=True, slots=True)
class Bar:
    """One step of an attempt: ``x`` and ``width`` on the shared axis, in axis units."""

    id: int
    key: str
    status: str
    started_at: datetime
    ended_at: datetime | None
    duration: timedelta
    seen_at: datetime
    detail: dict[str, Any] | None
    message: str | None
    x: float
    width: float
    trace_link: str | None
    duration_ms: float
    progress: Progress | None


@dataclass(frozen=True, slots=True)
class Mark:
    """An ordinary event (STALLED, RETRY_SCHEDULED, ...) at ``x`` on the shared axis."""

    id: int
    type: str
    message: str | None
    detail: dict[str, Any] | None
    at: datetime
    x: float


Row = Bar | Mark


@dataclass(frozen=True, slots=True)
class Lane:
    """One attempt: its summary, final row, and its steps and events in time order; ``rows``
    is the window drawn (at most `ROWS_SHOWN`, from row ``first`` of ``count``), none collapsed."""

    summary: AttemptSummary
    log: JobLogEntry | None
    rows: tuple[Row, ...]
    first: int
    count: int
    collapsed: bool
    trace_link: str | None
    open_bar: Bar | None
    marks: tuple[Mark, ...]
    tags: tuple[tuple[str, str], ...]  # (name, value): its job.tag.* attributes

    @property
    def hidden_after(self) -> int:
        """Rows after the window drawn."""
        return 0 if self.collapsed else self.count - self.first - len(self.rows)


@dataclass(frozen=True, slots=True)
class Timeline:
    """Every attempt of a job on one time axis from ``start`` to ``end``, and the selection."""

    start: datetime
    end: datetime
    as_of: datetime
    lanes: tuple[Lane, ...]
    ticks: tuple[datetime, ...]
    selected: Lane | None
    step: Bar | None
    step_lines: tuple[LogLine, ...]  # the selected step's log lines, oldest first
    attempt_lines: tuple[LogLine, ...]  # the selected attempt's lines between steps
    row_ids: frozenset[int]  # the tag rows (drawn_rows)

    @property
    def tick_labels(self) -> tuple[str, ...]:
        """The ticks as offsets from the start, precise enough that they differ."""
        span_ms = (self.end - self.start).total_seconds() * 1000
        if span_ms >= 1000:
            return tuple(format_duration(tick - self.start) for tick in self.ticks)
        decimals = 2 if span_ms < 10 else 1 if span_ms < 100 else 0
        return tuple(
            f"{(tick - self.start).total_seconds() * 1000:.{decimals}f}ms" for tick in self.ticks
        )

    @property
    def running(self) -> bool:
        """Whether anything is still open: the page keeps refreshing while it is."""
        return any(lane.summary.status == "RUNNING" for lane in self.lanes)


def _position(at: datetime, start: datetime, span: float) -> float:
    return round((at - start).total_seconds() / span * AXIS_WIDTH, 3)


@dataclass(frozen=True, slots=True)
class _Axis:
    """The time axis all attempts share: ``span`` seconds from ``start`` to ``end``."""

    start: datetime
    end: datetime
    span: float
    as_of: datetime
    links: TraceLinks | None

    @classmethod
    def of(
        cls,
        rows: list[dict[str, Any]],
        logs: list[JobLogEntry],
        as_of: datetime,
        links: TraceLinks | None,
    ) -> _Axis:
        """From the first row to the last end, or to ``as_of`` while a step is open."""
        times = [r["created_at"] for r in rows] + [log.created_at for log in logs]
        times += [r["ended_at"] or as_of for r in rows if r["type"] == STEP]
        start, end = min(times, default=as_of), max(times, default=as_of)
        return cls(start, end, max((end - start).total_seconds(), 1e-6), as_of, links)

    def bar(self, row: dict[str, Any]) -> Bar:
        return _bar(row, self.start, self.span, self.as_of, self.links)

    def mark(self, row: dict[str, Any]) -> Mark:
        return _mark(row, self.start, self.span)

    def trace_link(self, rows: list[dict[str, Any]], summary: AttemptSummary) -> str | None:
        """The link to an attempt's trace over its run, None without a template or trace."""
        if self.links is None:
            return None
        trace_id = next((r["trace_id"] for r in rows if r["trace_id"]), None)
        lane_start, lane_end = summary.started_at or self.start, summary.ended_at or self.as_of
        return self.links.link(trace_id, None, lane_start, lane_end)


def build_timeline(
    attempts: tuple[AttemptSummary, ...],
    rows: list[dict[str, Any]],
    logs: list[JobLogEntry],
    as_of: datetime,
    links: TraceLinks | None,
    *,
    attempt: int | None = None,
    step: str | None = None,
    first: int | None = None,
    lines: Sequence[LogLine] = (),
) -> Timeline:
    """A job's ``job_rows`` on one axis, ``attempt`` (default: the latest) selected with the last
    run of ``step``, its rows drawn from ``first``, its log ``lines`` beside them."""
    tags: dict[int, list[tuple[str, str]]] = {}
    for r in rows:
        if r["type"] == TAG:
            tags.setdefault(r["attempt"], []).append((r["step_key"], r.get("message") or ""))
    steps_and_events = [r for r in rows if r["type"] not in (LOG, TAG)]
    by_attempt_rows: dict[int, list[dict[str, Any]]] = {}
    for r in steps_and_events:
        by_attempt_rows.setdefault(r["attempt"], []).append(r)
    axis = _Axis.of(steps_and_events, logs, as_of, links)
    by_attempt = {log.attempt: log for log in logs}
    chosen = attempt if attempt is not None else attempts[-1].attempt if attempts else None
    lanes: list[Lane] = []
    selected, selected_step = None, None
    for summary in attempts:
        is_selected = summary.attempt == chosen
        lane, picked = _lane(
            summary,
            by_attempt_rows.get(summary.attempt, []),
            axis,
            log=by_attempt.get(summary.attempt),
            tags=tuple(tags.get(summary.attempt, ())),
            step=step if is_selected else None,
            first=first if is_selected else None,
            collapsible=not is_selected and summary is not attempts[-1],
        )
        lanes.append(lane)
        if is_selected:
            selected, selected_step = lane, picked
    start, end = axis.start, axis.end
    ticks = tuple(start + (end - start) * i / (TICKS - 1) for i in range(TICKS))
    chosen_lines = [line for line in lines if line.attempt == chosen]
    step_lines = tuple(
        line for line in chosen_lines if selected_step is not None and line.step_key == step
    )
    between = tuple(line for line in chosen_lines if line.step_key is None)
    row_ids = frozenset(r["id"] for r in rows if r["type"] == TAG)
    lanes_made = tuple(lanes)
    return Timeline(
        start, end, as_of, lanes_made, ticks, selected, selected_step, step_lines, between, row_ids
    )


def _lane(
    summary: AttemptSummary,
    own: list[dict[str, Any]],
    axis: _Axis,
    *,
    log: JobLogEntry | None,
    tags: tuple[tuple[str, str], ...],
    step: str | None,
    first: int | None,
    collapsible: bool,
) -> tuple[Lane, Bar | None]:
    """One attempt's lane, and the bar of the last run of ``step`` in it (None without one).
    Only the rows drawn become bars: a job of 10,000 steps draws 200."""
    picked = _last_run(own, step) if step is not None else None
    window_start = _window_start(len(own), picked, first)
    collapsed = collapsible and len(own) > COLLAPSE_OVER
    drawn = [] if collapsed else own[window_start : window_start + ROWS_SHOWN]
    shown = tuple(axis.bar(r) if r["type"] == STEP else axis.mark(r) for r in drawn)
    made = {id(raw): row for raw, row in zip(drawn, shown, strict=True)}

    def bar_of(raw: dict[str, Any]) -> Bar:
        found = made.get(id(raw))
        return found if isinstance(found, Bar) else axis.bar(raw)

    open_raw = next((r for r in own if r["type"] == STEP and r["ended_at"] is None), None)
    marks = tuple(
        found if isinstance(found := made.get(id(r)), Mark) else axis.mark(r)
        for r in own
        if r["type"] != STEP
    )
    lane = Lane(
        summary,
        log,
        shown,
        window_start,
        len(own),
        collapsed,
        axis.trace_link(own, summary),
        None if open_raw is None else bar_of(open_raw),
        marks,
        tags,
    )
    return lane, None if picked is None else bar_of(own[picked])


def drawn_rows(timeline: Timeline) -> set[int]:
    """The ids of the rows a page of ``timeline`` shows in full: the steps drawn, the selected
    one, and every row that is no step (events, tags and log lines are few and all shown)."""
    drawn = {row.id for lane in timeline.lanes for row in lane.rows}
    drawn.update(mark.id for lane in timeline.lanes for mark in lane.marks)
    drawn.update(timeline.row_ids)
    if timeline.step is not None:
        drawn.add(timeline.step.id)
    return drawn


def _last_run(rows: list[dict[str, Any]], key: str) -> int | None:
    """The index of the last STEP row of ``key`` among an attempt's rows."""
    return next(
        (
            i
            for i in reversed(range(len(rows)))
            if rows[i]["type"] == STEP and rows[i]["step_key"] == key
        ),
        None,
    )


def _window_start(count: int, picked: int | None, first: int | None) -> int:
    """Where the drawn window of an attempt's ``count`` rows starts: ``first`` if asked, else
    around the selected row, else at the end (where a running attempt's news is)."""
    most = max(count - ROWS_SHOWN, 0)
    if first is not None:
        return min(first, most)
    if picked is not None:
        return min(max(picked - ROWS_SHOWN // 2, 0), most)
    return most


def _mark(row: dict[str, Any], start: datetime, span: float) -> Mark:
    at = row["created_at"]
    return Mark(
        row["id"],
        row["type"],
        row.get("message"),
        row.get("detail"),
        at,
        _position(at, start, span),
    )


def _bar(
    row: dict[str, Any], start: datetime, span: float, as_of: datetime, links: TraceLinks | None
) -> Bar:
    ended_at: datetime | None = row["ended_at"]
    until = ended_at or as_of
    x = _position(row["created_at"], start, span)
    width = max(_position(until, start, span) - x, MIN_BAR_WIDTH)
    span_id = row.get("span_id")
    link = links.link(row["trace_id"], span_id, row["created_at"], until) if links else None
    duration = until - row["created_at"]
    detail = row.get("detail")
    return Bar(
        id=row["id"],
        key=row["step_key"],
        status=row["step_status"],
        started_at=row["created_at"],
        ended_at=ended_at,
        duration=duration,
        seen_at=row["seen_at"],
        detail=detail,
        message=row.get("message"),
        x=min(x, AXIS_WIDTH - MIN_BAR_WIDTH),
        width=round(width, 3),
        trace_link=link,
        duration_ms=round(duration.total_seconds() * 1000, 3),
        progress=progress_of(detail),
    )
