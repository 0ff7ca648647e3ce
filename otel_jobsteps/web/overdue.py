"""Overdue steps: a running step is overdue once it runs longer than its (job type, step key)'s
p99 over the last `BASELINE_WINDOW` times a factor, where at least `MIN_SAMPLES` steps completed.

The p99s are read by one statement (web.sql's step_baselines) and kept in serve's process, read
again at most every `REFRESH_AFTER`: a request or a scrape never scans history. serve is
read-only on purpose, so the cache is in memory rather than a table it would have to write.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg

from .._db import Record
from ..errors import ConfigurationError, DatabaseUnavailableError, SchemaNotMigratedError

__all__ = [
    "BASELINE_WINDOW",
    "DEFAULT_OVERDUE_FACTOR",
    "MIN_SAMPLES",
    "NO_LIMITS",
    "REFRESH_AFTER",
    "Baseline",
    "Baselines",
    "check_factor",
]

logger = logging.getLogger("otel_jobsteps.web")

DEFAULT_OVERDUE_FACTOR = 3.0
MIN_SAMPLES = 20  # completed steps a baseline needs: fewer, and the step is never overdue
BASELINE_WINDOW = timedelta(days=7)
REFRESH_AFTER = timedelta(minutes=5)

# What the overdue statements take: the limits as three arrays (web.sql's open_steps).
Limits = dict[str, list[Any]]
NO_LIMITS: Limits = {"job_types": [], "step_keys": [], "seconds": []}  # nothing is overdue


@dataclass(frozen=True, slots=True)
class Baseline(Record):
    """A (job type, step key)'s p99 duration over the window and how many steps it is of."""

    job_type: str | None
    step_key: str
    p99_seconds: float
    samples: int


def check_factor(factor: float) -> float:
    """``factor`` if a finite number above zero, else a `ConfigurationError`."""
    if not (math.isfinite(factor) and factor > 0):
        raise ConfigurationError(f"the overdue factor must be a number above 0, got {factor!r}")
    return factor


class Baselines:
    """The overdue limits (p99 x ``factor``) of ``read``'s baselines, cached: the first call
    reads them; once they are ``refresh_after`` old (by ``clock``, seconds), one background
    thread reads them again while the old ones still answer."""

    def __init__(
        self,
        read: Callable[[], list[Baseline]],
        factor: float = DEFAULT_OVERDUE_FACTOR,
        *,
        refresh_after: timedelta = REFRESH_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.factor = check_factor(factor)
        self._read, self._clock = read, clock
        self._refresh_after_s = refresh_after.total_seconds()
        self._lock = threading.Lock()
        self._limits: Limits | None = None
        self._read_at = 0.0
        self._refreshing = False

    def limits(self) -> Limits:
        """``job_types``, ``step_keys`` and ``seconds``: the statements' parameters."""
        with self._lock:
            current = self._limits
            stale = self._clock() - self._read_at >= self._refresh_after_s
            if current is not None and stale and not self._refreshing:
                self._refreshing = True
                threading.Thread(target=self._refresh_quietly, daemon=True).start()
        return current if current is not None else self._refresh()

    def _refresh(self) -> Limits:
        started = self._clock()
        try:
            found = self._read()
        finally:
            with self._lock:
                self._refreshing = False
        limits: Limits = {
            "job_types": [b.job_type for b in found],
            "step_keys": [b.step_key for b in found],
            "seconds": [b.p99_seconds * self.factor for b in found],
        }
        with self._lock:
            self._limits, self._read_at = limits, started
        return limits

    def _refresh_quietly(self) -> None:
        """A background refresh: on failure the old limits stay, the next call tries again."""
        try:
            self._refresh()
        except (DatabaseUnavailableError, SchemaNotMigratedError, psycopg.Error) as error:
            logger.warning("serve: overdue baselines not refreshed: %s", error)
