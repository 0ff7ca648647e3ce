"""Step RED metrics: what a committed batch closed and finished, through the ``otel_jobsteps``
meter. Recorded by whoever commits (the writer, ``collect``), never on the job's thread."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from opentelemetry import metrics

from .attributes import JOB_DOMAIN, JOB_STEP_KEY, JOB_TYPE
from .batch import EventRow, JobLogRow
from .errors import ConfigurationError

__all__ = [
    "ATTEMPTS",
    "DEFAULT_MAX_STEP_KEYS",
    "DURATION_BUCKETS_S",
    "MAX_STEP_KEYS_ENV",
    "OTHER_STEP_KEY",
    "STEP_DURATION",
    "ClosedStep",
    "Committed",
    "FinishedAttempt",
    "StepMetrics",
    "max_step_keys_from_environment",
]

STEP_DURATION = "otel_jobsteps.step.duration"
ATTEMPTS = "otel_jobsteps.attempts"
# Jobs run from milliseconds to an hour: 10 ms ... 1 h.
DURATION_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    1800.0, 3600.0,
)  # fmt: skip
# Step keys of a job type beyond the bound are recorded under this one value.
OTHER_STEP_KEY = "__other__"
DEFAULT_MAX_STEP_KEYS = 100
MAX_STEP_KEYS_ENV = "OTEL_JOBSTEPS_METRICS_MAX_STEP_KEYS"
JOB_STEP_STATUS = "job.step.status"
JOB_STATUS = "job.status"
JOB_REASON = "job.reason"


class ClosedStep(NamedTuple):
    """A step row a transaction closed (or inserted closed)."""

    trace_id: str | None
    span_id: str | None
    domain: str
    job_type: str | None
    step_key: str | None
    status: str
    seconds: float


class FinishedAttempt(NamedTuple):
    """A final ``job_log`` row a transaction inserted."""

    domain: str
    job_id: str
    attempt: int
    job_type: str | None
    status: str
    reason: str | None


@dataclass(slots=True)
class Committed:
    """What one transaction changed that metrics count: only rows its statements did change.

    Rows it inserted are kept as they are (``step_rows``: closed STEP rows; ``log_rows``) and
    read as steps and attempts only when recorded: with metrics off that costs nothing.
    """

    steps: list[ClosedStep] = field(default_factory=list)
    attempts: list[FinishedAttempt] = field(default_factory=list)
    step_rows: list[EventRow] = field(default_factory=list)
    log_rows: list[JobLogRow] = field(default_factory=list)

    def closed_steps(self) -> list[ClosedStep]:
        return self.steps + [
            ClosedStep(r.trace_id, r.span_id, r.domain, r.job_type, r.step_key, r.step_status or "",
                       ((r.ended_us or r.created_us) - r.created_us) / 1e6)
            for r in self.step_rows
        ]  # fmt: skip

    def finished_attempts(self) -> list[FinishedAttempt]:
        return self.attempts + [
            FinishedAttempt(r.domain, r.job_id, r.attempt, r.job_type, r.status, r.reason)
            for r in self.log_rows
        ]

    def extend(self, other: Committed) -> None:
        self.steps.extend(other.steps)
        self.attempts.extend(other.attempts)
        self.step_rows.extend(other.step_rows)
        self.log_rows.extend(other.log_rows)

    def without(
        self,
        steps: Iterable[tuple[str | None, str | None]],
        attempts: Iterable[tuple[str, str, int]],
    ) -> Committed:
        """This, less the steps (trace id, span id) and attempts already counted before."""
        old_steps, old_attempts = set(steps), set(attempts)
        return Committed(
            [s for s in self.closed_steps() if (s.trace_id, s.span_id) not in old_steps],
            [
                a
                for a in self.finished_attempts()
                if (a.domain, a.job_id, a.attempt) not in old_attempts
            ],
        )


def _records_nothing(instrument: object) -> bool:
    """The API's no-op instrument, or its proxy while no MeterProvider is set (its private
    ``_real_instrument``, read here only): then there is nothing to record."""
    return (
        isinstance(instrument, metrics.NoOpHistogram)
        or getattr(instrument, "_real_instrument", False) is None
    )


def max_step_keys_from_environment(value: int | None) -> int:
    """``value``, else ``OTEL_JOBSTEPS_METRICS_MAX_STEP_KEYS``, else the default (>= 1)."""
    if value is None:
        raw = os.environ.get(MAX_STEP_KEYS_ENV, "")
        try:
            value = int(raw) if raw else DEFAULT_MAX_STEP_KEYS
        except ValueError:
            message = f"{MAX_STEP_KEYS_ENV} must be an integer, got {raw!r}"
            raise ConfigurationError(message) from None
    if value < 1:
        raise ConfigurationError(f"max_step_keys must be positive, got {value!r}")
    return value


class StepMetrics:
    """The step duration histogram and the attempts counter, step keys bounded per job type.

    Attempts are counted here and observed by the SDK when it collects (an observable
    counter): an SDK measurement costs some 10 us, a count here a fraction of one.
    """

    def __init__(
        self,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        max_step_keys: int | None = None,
        on_folded: Callable[[int], None] = lambda count: None,
    ) -> None:
        meter = metrics.get_meter("otel_jobsteps", meter_provider=meter_provider)
        self._duration = meter.create_histogram(
            STEP_DURATION,
            unit="s",
            description="Duration of committed steps, by job type, step key and status",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S,
        )
        # (domain, job type, status, reason) -> attempts; several threads record in collect.
        self._attempt_counts: dict[tuple[str, str | None, str, str | None], int] = {}
        self._lock = threading.Lock()
        ref = weakref.ref(self)  # the MeterProvider must not keep this alive

        def observe(_options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
            step_metrics = ref()
            return [] if step_metrics is None else step_metrics._attempt_observations()

        meter.create_observable_counter(
            ATTEMPTS,
            [observe],
            unit="{attempt}",
            description="Finished attempts committed, by job type, status and reason",
        )
        self._max_step_keys = max_step_keys_from_environment(max_step_keys)
        self._on_folded = on_folded  # counts steps recorded under OTHER_STEP_KEY
        self._keys: dict[str | None, set[str]] = {}
        # Attribute dicts by their values: a batch's steps mostly repeat a few.
        self._step_attributes: dict[tuple[str, str | None, str, str], dict[str, str]] = {}

    def record(self, committed: Committed) -> None:
        """Record what one committed transaction changed (nothing while metrics are off)."""
        if _records_nothing(self._duration):
            return
        folded = 0
        record_duration = self._duration.record
        for step in committed.closed_steps():
            key = self._bounded_key(step.job_type, step.step_key or "")
            folded += key is OTHER_STEP_KEY
            record_duration(max(step.seconds, 0.0), self._attributes(step, key))
        attempts = committed.finished_attempts()
        if attempts:
            counts = self._attempt_counts
            with self._lock:
                for a in attempts:
                    counted = (a.domain, a.job_type, a.status, a.reason or None)
                    counts[counted] = counts.get(counted, 0) + 1
        if folded:
            self._on_folded(folded)

    def _attempt_observations(self) -> list[metrics.Observation]:
        with self._lock:
            counts = list(self._attempt_counts.items())
        observations = []
        for (domain, job_type, status, reason), count in counts:
            attributes = {JOB_DOMAIN: domain, JOB_STATUS: status}
            if job_type is not None:
                attributes[JOB_TYPE] = job_type
            if reason is not None:
                attributes[JOB_REASON] = reason
            observations.append(metrics.Observation(count, attributes))
        return observations

    def _bounded_key(self, job_type: str | None, step_key: str) -> str:
        keys = self._keys.setdefault(job_type, set())
        if step_key in keys:
            return step_key
        if len(keys) >= self._max_step_keys:
            return OTHER_STEP_KEY
        keys.add(step_key)
        return step_key

    def _attributes(self, step: ClosedStep, key: str) -> dict[str, str]:
        values = (step.domain, step.job_type, key, step.status)
        attributes = self._step_attributes.get(values)
        if attributes is None:
            attributes = {JOB_DOMAIN: step.domain, JOB_STEP_KEY: key, JOB_STEP_STATUS: step.status}
            if step.job_type is not None:
                attributes[JOB_TYPE] = step.job_type
            if len(self._step_attributes) < 10_000:  # a cache, bounded like the keys
                self._step_attributes[values] = attributes
        return attributes
