"""Helpers of the outage tests: run planned jobs, say which rows they must leave, read rows back."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import Span, Tracer
from opentelemetry.util.types import AttributeValue

from otel_jobsteps import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_ID,
    JOB_STEP_DETAIL,
    JOB_STEP_KEY,
    JOB_TYPE,
    JobStepsProcessor,
    job_attempt,
    progress,
    step,
)

__all__ = [
    "DOMAIN",
    "PASSWORD",
    "STEP_COLUMNS",
    "Bridge",
    "BridgeFactory",
    "JobRows",
    "StepPlan",
    "assert_rows",
    "at",
    "ended_at",
    "expected_logs",
    "expected_steps",
    "log_rows",
    "plan",
    "run_job",
    "run_jobs",
    "start_open_step",
    "started_at",
    "stat",
    "step_rows",
]

PASSWORD = "hunter2-secret"
DOMAIN = "faults"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

StepRow = tuple[Any, ...]
LogRow = tuple[Any, ...]


@dataclass
class Bridge:
    """A tracer whose provider feeds one JobStepsProcessor that writes through the proxy."""

    tracer: Tracer
    processor: JobStepsProcessor
    provider: TracerProvider


BridgeFactory = Callable[..., Bridge]


@dataclass(frozen=True)
class StepPlan:
    """One step of a planned job: progress snapshots, an explicit end detail, or a failure."""

    key: str
    progress: Sequence[dict[str, Any]] = ()
    explicit: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class JobRows:
    """The rows one finished job must leave: its step rows in order and its job_log row."""

    steps: list[StepRow] = field(default_factory=list)
    log: LogRow | None = None


def at(ns: int) -> datetime:
    """A span timestamp as PostgreSQL stores it (microseconds, UTC)."""
    return _EPOCH + timedelta(microseconds=ns // 1000)


def ended_at(span: Span) -> datetime:
    """When a finished span ended, as PostgreSQL stores it."""
    return at(_times(span)[1])


def started_at(span: Span) -> datetime:
    """When a span started, as PostgreSQL stores it."""
    return at(_times(span)[0])


def _times(span: Span) -> tuple[int, int]:
    assert isinstance(span, ReadableSpan)
    assert span.start_time is not None
    assert span.end_time is not None
    return span.start_time, span.end_time


def run_job(tracer: Tracer, job_id: str, plan: Sequence[StepPlan], attempt: int = 1) -> JobRows:
    """Run one attempt of a job by ``plan`` on the caller's thread; return the rows it implies.

    A planned failure ends the job there (FAILED). Any other exception escapes: the job saw
    something the bridge should have absorbed.
    """
    ran: list[tuple[StepPlan, Span]] = []
    planned_error: OSError | None = None
    try:
        with job_attempt(DOMAIN, job_id, "faults", attempt - 1, tracer=tracer) as job_span:
            for planned in plan:
                with step(planned.key, tracer=tracer) as step_span:
                    ran.append((planned, step_span))
                    for snapshot in planned.progress:
                        progress(snapshot)
                    if planned.explicit is not None:
                        step_span.set_attribute(JOB_STEP_DETAIL, json.dumps(planned.explicit))
                    if planned.error is not None:
                        planned_error = OSError(planned.error)
                        raise planned_error
    except OSError as error:
        if error is not planned_error:
            raise
    expected = JobRows([_step_row(job_id, attempt, planned, span) for planned, span in ran])
    _, job_end = _times(job_span)
    if planned_error is None:
        expected.log = (job_id, attempt, "COMPLETED", None, None, at(job_end))
    else:
        detail = {"step": ran[-1][0].key, "error": f"OSError: {planned_error}"}
        expected.log = (job_id, attempt, "FAILED", "error", detail, at(job_end))
    return expected


def _step_row(job_id: str, attempt: int, planned: StepPlan, span: Span) -> StepRow:
    start, end = _times(span)
    detail = planned.explicit
    if detail is None and planned.progress:
        detail = dict(planned.progress[-1])
    status = "FAILED" if planned.error is not None else "COMPLETED"
    message = None if planned.error is None else f"OSError: {planned.error}"
    return (job_id, attempt, planned.key, status, detail, message, at(start), at(end))


STEP_COLUMNS = "job_id, attempt, step_key, step_status, detail, message, created_at, ended_at"


def step_rows(conn: psycopg.Connection[Any], job_ids: Sequence[str] | None = None) -> list[StepRow]:
    """STEP rows in insertion order, as `run_job` describes them."""
    query = f"SELECT {STEP_COLUMNS} FROM job_event WHERE type = 'STEP'"
    if job_ids is None:
        return conn.execute(query + " ORDER BY id").fetchall()
    return conn.execute(query + " AND job_id = ANY(%s) ORDER BY id", (list(job_ids),)).fetchall()


def log_rows(conn: psycopg.Connection[Any]) -> list[LogRow]:
    """job_log rows in insertion order, as `run_job` describes them."""
    return conn.execute(
        "SELECT job_id, attempt, status, reason, detail, created_at FROM job_log ORDER BY id"
    ).fetchall()


def expected_steps(jobs: Sequence[JobRows]) -> list[StepRow]:
    return [row for job in jobs for row in job.steps]


def expected_logs(jobs: Sequence[JobRows]) -> list[LogRow]:
    return [job.log for job in jobs if job.log is not None]


def plan(n: int) -> list[StepPlan]:
    """Three steps: debounced progress, an explicit end detail, and every third job a failure."""
    last = (
        StepPlan("UPLOAD", progress=[{"sent": n}], error=f"disk full #{n}")
        if n % 3 == 2
        else StepPlan("UPLOAD")
    )
    return [
        StepPlan("FETCH", progress=[{"pct": 10}, {"pct": 60}, {"pct": 100, "n": n}]),
        StepPlan("RENDER", progress=[{"pages": 1}], explicit={"pages": n, "final": True}),
        last,
    ]


def run_jobs(tracer: trace.Tracer, prefix: str, count: int) -> list[JobRows]:
    return [run_job(tracer, f"{prefix}-{n}", plan(n)) for n in range(count)]


def start_open_step(tracer: trace.Tracer, job_id: str) -> tuple[trace.Span, trace.Span]:
    """A job span and a RENDER step span left open, as a job in the middle of its work."""
    attributes: dict[str, AttributeValue] = {
        JOB_DOMAIN: DOMAIN,
        JOB_ID: job_id,
        JOB_TYPE: "faults",
        JOB_ATTEMPT: 1,
    }
    job = tracer.start_span("job", attributes=attributes)
    with trace.use_span(job, end_on_exit=False):
        render = tracer.start_span("render", attributes={JOB_STEP_KEY: "RENDER"})
    return job, render


def close_open_step(
    job: trace.Span, render: trace.Span, progress: dict[str, Any] | None = None
) -> JobRows:
    """End a job left open by `start_open_step`, its step reporting ``progress`` first; the
    rows it must leave."""
    if progress is not None:
        render.add_event("progress", progress)
    render.end()
    job.end()
    assert isinstance(job, ReadableSpan)
    assert job.attributes is not None
    job_id = job.attributes[JOB_ID]
    rendered = ("RENDER", "COMPLETED", progress, None, started_at(render), ended_at(render))
    return JobRows([(job_id, 1, *rendered)], (job_id, 1, "COMPLETED", None, None, ended_at(job)))


def stat(processor: JobStepsProcessor, name: str) -> int:
    value = processor.stats().get(name, 0)
    assert isinstance(value, int)
    return value


def assert_rows(conn: psycopg.Connection[Any], jobs: list[JobRows]) -> None:
    """Exactly these jobs' rows, in order: nothing lost, nothing written twice."""
    assert step_rows(conn) == expected_steps(jobs)
    assert log_rows(conn) == expected_logs(jobs)
