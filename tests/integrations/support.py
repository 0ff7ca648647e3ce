"""Waiting for the workers' rows and asserting what each queue must have recorded.

The assertion helpers state the outcome paths every adapter maps the same way; a test adds
what is particular to its queue (event details, the queue's own view of the job).
"""

from __future__ import annotations

from typing import Any, TypeVar

import psycopg

from otel_jobsteps.query import JobDetail, job_detail
from tests.conftest import wait_until

T = TypeVar("T")

_STEP_ROWS = (
    "SELECT attempt, step_key, step_status, message FROM job_event"
    " WHERE domain = %s AND job_id = %s AND type = 'STEP' ORDER BY id"
)
_LOG_ROWS = (
    "SELECT attempt, status, reason FROM job_log WHERE domain = %s AND job_id = %s ORDER BY attempt"
)


def wait_for_log(
    dsn: str, domain: str, job_id: str, attempt: int, *, timeout_s: float = 30.0
) -> JobDetail:
    """The job's detail once ``attempt`` has its job_log row."""

    def probe() -> JobDetail | None:
        detail = job_detail(dsn, domain, job_id, attempt)
        return detail if detail is not None and detail.log is not None else None

    what = f"job_log of {job_id} attempt {attempt}"
    return wait_until(probe, what=what, timeout_s=timeout_s, max_interval_s=0.5)


def wait_for_step(
    dsn: str,
    domain: str,
    job_id: str,
    key: str,
    *,
    status: str = "RUNNING",
    timeout_s: float = 30.0,
) -> JobDetail:
    """The job's detail once its latest attempt has step ``key`` in ``status``."""

    def probe() -> JobDetail | None:
        detail = job_detail(dsn, domain, job_id)
        if detail is None:
            return None
        return detail if any(s.key == key and s.status == status for s in detail.steps) else None

    what = f"step {key} {status} of {job_id}"
    return wait_until(probe, what=what, timeout_s=timeout_s, max_interval_s=0.5)


def step_rows(dsn: str, domain: str, job_id: str) -> list[tuple[Any, ...]]:
    """(attempt, step_key, step_status, message) of every STEP row, in insert order."""
    return _job_rows(dsn, _STEP_ROWS, domain, job_id)


def log_rows(dsn: str, domain: str, job_id: str) -> list[tuple[Any, ...]]:
    """(attempt, status, reason) of every job_log row of the job."""
    return _job_rows(dsn, _LOG_ROWS, domain, job_id)


def _job_rows(dsn: str, query: str, domain: str, job_id: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query, (domain, job_id)).fetchall()  # type: ignore[arg-type]


def event_types(detail: JobDetail) -> list[tuple[int, str]]:
    return [(event.attempt, event.type) for event in detail.events]


def assert_retried_then_completed(
    dsn: str, domain: str, job_id: str, *, save_error: str, job_type: str
) -> JobDetail:
    """Attempt 1 failed in SAVE with ``save_error`` and was retried; attempt 2 completed.

    Returns attempt 2's detail.
    """
    detail = wait_for_log(dsn, domain, job_id, 2)
    assert step_rows(dsn, domain, job_id) == [
        (1, "RENDER", "COMPLETED", None),
        (1, "SAVE", "FAILED", save_error),
        (2, "RENDER", "COMPLETED", None),
        (2, "SAVE", "COMPLETED", None),
    ]
    assert log_rows(dsn, domain, job_id) == [(1, "FAILED", "retry"), (2, "COMPLETED", None)]
    assert detail.job_type == job_type
    assert [s.key for s in detail.steps] == ["RENDER", "SAVE"]
    assert event_types(detail) == [(1, "RETRY_SCHEDULED")]
    return detail


def assert_time_limited(dsn: str, domain: str, job_id: str) -> JobDetail:
    """Attempt 1 ended FAILED ``time_limit`` with its RENDER step failed."""
    detail = wait_for_log(dsn, domain, job_id, 1)
    assert log_rows(dsn, domain, job_id) == [(1, "FAILED", "time_limit")]
    assert [(s.key, s.status) for s in detail.steps] == [("RENDER", "FAILED")]
    return detail


def assert_killed_run_recovered(
    dsn: str, domain: str, job_id: str, *, rerun_attempt: int, timeout_s: float = 30.0
) -> JobDetail:
    """A run of attempt 1 killed in RENDER is STALLED; ``rerun_attempt`` then completed.

    ``rerun_attempt`` 1 is the same attempt run again, 2 the next attempt; either way the rerun
    closed the dead run's open step as abandoned, and every earlier attempt ends abandoned.
    """
    detail = wait_for_log(dsn, domain, job_id, rerun_attempt, timeout_s=timeout_s)
    assert step_rows(dsn, domain, job_id) == [
        (1, "RENDER", "FAILED", "abandoned"),
        (rerun_attempt, "RENDER", "COMPLETED", None),
        (rerun_attempt, "SAVE", "COMPLETED", None),
    ]
    abandoned = [(attempt, "FAILED", "abandoned") for attempt in range(1, rerun_attempt)]
    assert log_rows(dsn, domain, job_id) == [*abandoned, (rerun_attempt, "COMPLETED", None)]
    assert event_types(detail) == [(1, "STALLED")]
    assert detail.stalled_count == 1
    return detail
