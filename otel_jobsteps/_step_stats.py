"""Step numbers over a window, for the CLI's ``steps`` and the web's /steps: closed step
durations per job type and step (``job_step_durations``) and the retry tax (``job_retry_tax``).
The statements are web.sql's ``step_stats`` and ``retry_tax``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from ._db import Record, fetch
from .sql import qualified_queries

__all__ = ["RetryTax", "StepStat", "read_retry_tax", "read_step_stats"]


@dataclass(frozen=True, slots=True)
class StepStat(Record):
    """Closed steps of one job type and step key over a window: count, failures, durations."""

    job_type: str | None
    step_key: str
    steps: int
    failed: int
    p50_seconds: float
    p95_seconds: float
    max_seconds: float
    last_ended_at: datetime


@dataclass(frozen=True, slots=True)
class RetryTax(Record):
    """What failed attempts cost one job type at one step over a window: the attempts that
    failed there, the seconds failed attempts spent in it, and the type's time to success of
    the jobs retried to success (first attempt's start to the completing attempt's end; None:
    none was)."""

    job_type: str | None
    step_key: str
    failed_attempts: int
    failed_seconds: float
    to_success_p50_seconds: float | None
    to_success_p95_seconds: float | None


def read_step_stats(
    conn: psycopg.Connection[Any], schema: str, since_at: datetime | None
) -> list[StepStat]:
    """Per job type and step key: the steps closed since ``since_at`` (None: every row)."""
    query = qualified_queries("web.sql", schema)["step_stats"]
    # Planned for the window's start: the partitioned layout's old children are skipped.
    return fetch(conn, query, {"since_at": since_at}, StepStat, prepare=False)


def read_retry_tax(
    conn: psycopg.Connection[Any], schema: str, since_at: datetime | None
) -> list[RetryTax]:
    """Per job type and step key: the retry tax of the attempts failed since ``since_at``."""
    query = qualified_queries("web.sql", schema)["retry_tax"]
    return fetch(conn, query, {"since_at": since_at}, RetryTax, prepare=False)
