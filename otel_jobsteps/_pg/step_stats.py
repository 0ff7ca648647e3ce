"""Step numbers over a window, for the CLI's ``steps`` and the web's /steps: closed step
durations per job type and step (``job_step_durations``), the retry tax (``job_retry_tax``) and
the same steps by release (``service.version``), a version flagged when it regressed against the
previous one. The statements are web.sql's ``step_stats``, ``retry_tax`` and ``step_versions``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from ..errors import ConfigurationError
from ..sql import qualified_queries
from .db import Record, fetch

__all__ = [
    "RetryTax",
    "StepStat",
    "StepVersion",
    "Thresholds",
    "parse_thresholds",
    "read_retry_tax",
    "read_step_stats",
    "read_step_versions",
]

MAX_SAMPLES = 999_999
_NUMBER = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9})?")  # plain decimals: no sign, exponent, nan, inf


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


@dataclass(frozen=True, slots=True)
class StepVersion(Record):
    """Closed steps of one job type and step key in attempts of one ``service.version`` over a
    window, against the previous version of that step (None: the first one seen), and whether
    the version regressed: its p95 or its failure ratio moved past the `Thresholds`."""

    job_type: str | None
    step_key: str
    service_version: str
    first_seen_at: datetime  # the earliest final row with this version in the window
    steps: int
    failed: int
    failure_ratio: float
    p95_seconds: float
    previous_version: str | None
    previous_steps: int | None
    previous_failure_ratio: float | None
    previous_p95_seconds: float | None
    p95_regressed: bool
    failure_regressed: bool


@dataclass(frozen=True, slots=True)
class Thresholds:
    """When a version regressed against the previous one: its p95 more than ``p95_factor``
    times the previous p95, or its failure ratio up by more than ``failure_points`` percentage
    points, with at least ``min_samples`` closed steps on each side."""

    p95_factor: float = 1.5
    failure_points: float = 5.0
    min_samples: int = 20


def parse_thresholds(
    p95_factor: str | None, failure_points: str | None, min_samples: str | None
) -> Thresholds:
    """`Thresholds` from text (a URL's or a command line's; None or empty: the default), or a
    one-line `ConfigurationError`: p95_factor a number from 1, failure_points from 0 to 100,
    min_samples an integer from 1."""
    default = Thresholds()
    factor = _number("p95_factor", p95_factor, default.p95_factor, (1.0, 1000.0))
    points = _number("failure_points", failure_points, default.failure_points, (0.0, 100.0))
    samples = _number("min_samples", min_samples, default.min_samples, (1, MAX_SAMPLES))
    if samples != int(samples):
        raise ConfigurationError(f"min_samples must be a whole number, got {samples:g}")
    return Thresholds(factor, points, int(samples))


def _number(name: str, text: str | None, default: float, bounds: tuple[float, float]) -> float:
    if not text:
        return default
    low, high = bounds
    value = float(text) if _NUMBER.fullmatch(text) else math.nan
    if not low <= value <= high:
        shown = text[:40]  # an echo of the input, cut
        raise ConfigurationError(f"{name} must be a number from {low:g} to {high:g}, got {shown!r}")
    return value


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


def read_step_versions(
    conn: psycopg.Connection[Any], schema: str, since_at: datetime | None, thresholds: Thresholds
) -> list[StepVersion]:
    """Per job type, step key and ``service.version`` (in order of first appearance): the
    steps closed since ``since_at`` in finished attempts, each version flagged by
    ``thresholds`` against the previous one."""
    query = qualified_queries("web.sql", schema)["step_versions"]
    params = {
        "since_at": since_at,
        "p95_factor": thresholds.p95_factor,
        "failure_points": thresholds.failure_points,
        "min_samples": thresholds.min_samples,
    }
    return fetch(conn, query, params, StepVersion, prepare=False)
