"""What the pages draw, computed from rows: swimlane geometry, trace links, paging cursors.

Pure functions and frozen dataclasses, no I/O: the templates only print these values, and the
unit tests check the arithmetic without a browser or a database.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote, urlsplit

from ..errors import ConfigurationError
from ..query import AttemptSummary, JobLogEntry
from ..timeline import format_duration

__all__ = [
    "AXIS_WIDTH",
    "WINDOWS",
    "Bar",
    "Cursor",
    "Lane",
    "Mark",
    "Timeline",
    "TraceLinks",
    "build_timeline",
]

AXIS_WIDTH = 1000.0
"""Width of the time axis in SVG user units; bars are placed in these units."""
MIN_BAR_WIDTH = 2.0  # a step of a microsecond stays visible and clickable
TICKS = 5
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
PLACEHOLDERS = ("{trace_id}", "{span_id}", "{start_ms}", "{end_ms}")
_HEX = re.compile(r"[0-9a-f]+")


class TraceLinks:
    """Links to a trace viewer from a template such as
    ``http://localhost:16686/trace/{trace_id}?uiFind={span_id}``.

    Only ``{trace_id}``, ``{span_id}``, ``{start_ms}`` and ``{end_ms}`` are replaced (plain
    replacement, so JSON braces in a Grafana URL stay as they are); the template must be an
    http or https URL, and ids that are not lowercase hex of the OpenTelemetry sizes give no link.
    """

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
    """Where the next page of jobs starts: below activity time ``at``; with a domain and job id,
    below that job (exclusive), without them at ``at`` itself included."""

    at: datetime
    domain: str | None = None
    job_id: str | None = None

    def query(self) -> dict[str, str]:
        """The cursor as URL query parameters."""
        found = {"before": self.at.isoformat()}
        if self.domain is not None and self.job_id is not None:
            found.update(before_domain=self.domain, before_job=self.job_id)
        return found

    @classmethod
    def parse(cls, params: dict[str, str]) -> Cursor | None:
        """The cursor in URL query parameters, None for the first page; `ConfigurationError`
        when ``before`` is not an ISO 8601 time with its offset."""
        text = params.get("before")
        if not text:
            return None
        try:
            at = datetime.fromisoformat(text)
        except ValueError:
            raise ConfigurationError("before must be an ISO 8601 time") from None
        if at.tzinfo is None:
            raise ConfigurationError("before must carry its UTC offset")
        domain, job_id = params.get("before_domain"), params.get("before_job")
        if domain is None or job_id is None:
            return cls(at)
        return cls(at, domain, job_id)


@dataclass(frozen=True, slots=True)
class Bar:
    """One step on its attempt's lane: ``x`` and ``width`` in axis units; ``label`` its tooltip
    (precomputed: a job of a thousand steps draws a thousand bars)."""

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
    label: str
    duration_ms: float


@dataclass(frozen=True, slots=True)
class Mark:
    """An ordinary event (STALLED, RETRY_SCHEDULED, ...) at ``x`` on its attempt's lane."""

    type: str
    message: str | None
    detail: dict[str, Any] | None
    at: datetime
    x: float


@dataclass(frozen=True, slots=True)
class Lane:
    """One attempt: its summary, final row, steps as bars and events as marks."""

    summary: AttemptSummary
    log: JobLogEntry | None
    bars: tuple[Bar, ...]
    marks: tuple[Mark, ...]
    trace_link: str | None

    @property
    def open_bar(self) -> Bar | None:
        """The step still running, if any."""
        return next((b for b in self.bars if b.ended_at is None), None)


@dataclass(frozen=True, slots=True)
class Timeline:
    """Every attempt of a job on one time axis from ``start`` to ``end``."""

    start: datetime
    end: datetime
    as_of: datetime
    lanes: tuple[Lane, ...]
    ticks: tuple[datetime, ...]

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


def build_timeline(
    attempts: tuple[AttemptSummary, ...],
    rows: list[dict[str, Any]],
    logs: list[JobLogEntry],
    as_of: datetime,
    links: TraceLinks | None,
) -> Timeline:
    """Lay out a job's ``job_rows`` (steps and events, every attempt) on one axis.

    The axis runs from the first row to the last end, or to ``as_of`` while a step is open, so a
    running bar grows as the page refreshes.
    """
    times = [r["created_at"] for r in rows] + [log.created_at for log in logs]
    times += [r["ended_at"] or as_of for r in rows if r["type"] == "STEP"]
    start = min(times, default=as_of)
    end = max(times, default=as_of)
    span = max((end - start).total_seconds(), 1e-6)
    by_attempt = {log.attempt: log for log in logs}
    lanes = []
    for summary in attempts:
        own = [r for r in rows if r["attempt"] == summary.attempt]
        bars = tuple(_bar(r, start, span, as_of, links) for r in own if r["type"] == "STEP")
        marks = tuple(
            Mark(
                r["type"],
                r["message"],
                r["detail"],
                r["created_at"],
                _position(r["created_at"], start, span),
            )
            for r in own
            if r["type"] != "STEP"
        )
        trace_id = next((r["trace_id"] for r in own if r["trace_id"]), None)
        lane_start = summary.started_at or start
        lane_end = summary.ended_at or as_of
        trace_link = links.link(trace_id, None, lane_start, lane_end) if links else None
        lanes.append(Lane(summary, by_attempt.get(summary.attempt), bars, marks, trace_link))
    ticks = tuple(start + (end - start) * i / (TICKS - 1) for i in range(TICKS))
    return Timeline(start, end, as_of, tuple(lanes), ticks)


def _bar(
    row: dict[str, Any], start: datetime, span: float, as_of: datetime, links: TraceLinks | None
) -> Bar:
    ended_at: datetime | None = row["ended_at"]
    until = ended_at or as_of
    x = _position(row["created_at"], start, span)
    width = max(_position(until, start, span) - x, MIN_BAR_WIDTH)
    link = links.link(row["trace_id"], row["span_id"], row["created_at"], until) if links else None
    duration = until - row["created_at"]
    return Bar(
        key=row["step_key"],
        status=row["step_status"],
        started_at=row["created_at"],
        ended_at=ended_at,
        duration=duration,
        seen_at=row["seen_at"],
        detail=row["detail"],
        message=row["message"],
        x=min(x, AXIS_WIDTH - MIN_BAR_WIDTH),
        width=round(width, 3),
        trace_link=link,
        label=f"{row['step_key']} {row['step_status']} {format_duration(duration)}",
        duration_ms=round(duration.total_seconds() * 1000, 3),
    )
