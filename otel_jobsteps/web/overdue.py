"""Overdue steps: a running step is overdue once it runs longer than its (job type, step key)'s
p99 over the last `BASELINE_WINDOW` times a factor, where at least `MIN_SAMPLES` steps completed.

The p99s are read by one statement (web.sql's step_baselines) and kept in serve's process, read
again at most every `REFRESH_AFTER`, in the background: a request or a scrape never scans
history (the first ones after serve starts wait for the first read). serve is
read-only on purpose, so the cache is in memory rather than a table it would have to write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg

from .._cli.arguments import check_factor
from .._pg.db import Record
from ..errors import JobStepsError

__all__ = [
    "BASELINE_WINDOW",
    "DEFAULT_OVERDUE_FACTOR",
    "MIN_SAMPLES",
    "NO_LIMITS",
    "REFRESH_AFTER",
    "Baseline",
    "Baselines",
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


class Baselines:
    """The overdue limits (p99 x ``factor``) of ``read``'s baselines, cached. Each read runs in
    a background thread, one at a time: the first from serve's start (`start`), and a call
    before it ends waits for it; once the limits are ``refresh_after`` old (by ``clock``,
    seconds), the next call starts another read while the old limits still answer."""

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
        self._reading: threading.Thread | None = None
        self._error: Exception | None = None  # why the last read failed

    def start(self) -> None:
        """Begin reading the baselines now (unless a read runs): serve's start."""
        with self._lock:
            self._start_read()

    def limits(self) -> Limits:
        """``job_types``, ``step_keys`` and ``seconds``: the statements' parameters. Raises
        the read's error while no read has succeeded yet."""
        with self._lock:
            if self._limits is None or self._clock() - self._read_at >= self._refresh_after_s:
                self._start_read()
            current, reading = self._limits, self._reading
        if current is not None:
            return current
        if reading is not None:
            reading.join()  # the first read: wait for it
        with self._lock:
            if self._limits is None:
                raise self._error or RuntimeError("the overdue baselines were not read")
            return self._limits

    def _start_read(self) -> None:
        """A read in the background unless one runs (the caller holds the lock)."""
        if self._reading is None:
            self._reading = threading.Thread(target=self._refresh, daemon=True)
            self._reading.start()

    def _refresh(self) -> None:
        try:
            self._read_once()
        finally:
            with self._lock:
                self._reading = None

    def _read_once(self) -> None:
        started = self._clock()
        try:
            found = self._read()
        except (JobStepsError, psycopg.Error) as error:  # kept for callers waiting on a first read
            if self._limits is not None:
                logger.warning("serve: overdue baselines not read again: %s", error)
            with self._lock:
                self._error = error
            return
        limits: Limits = {
            "job_types": [b.job_type for b in found],
            "step_keys": [b.step_key for b in found],
            "seconds": [b.p99_seconds * self.factor for b in found],
        }
        with self._lock:
            self._limits, self._read_at, self._error = limits, started, None
