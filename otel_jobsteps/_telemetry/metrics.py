"""Step RED metrics: what a committed batch closed and finished, through the ``otel_jobsteps``
meter. Recorded by whoever commits (the writer, ``collect``), never on the job's thread."""

from __future__ import annotations

import math
import os
import threading
import weakref
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, NamedTuple

from opentelemetry import metrics
from opentelemetry.sdk.metrics import AlwaysOnExemplarFilter
from opentelemetry.sdk.metrics import Histogram as SdkHistogram
from opentelemetry.sdk.metrics._internal._view_instrument_match import _hash_attributes
from opentelemetry.sdk.metrics._internal.aggregation import _ExplicitBucketHistogramAggregation
from opentelemetry.sdk.metrics.view import DefaultAggregation

from .._core.batch import EventRow, JobLogRow
from ..attributes import JOB_DOMAIN, JOB_STEP_KEY, JOB_TYPE
from ..errors import ConfigurationError

__all__ = [
    "ATTEMPTS",
    "DEFAULT_MAX_JOB_TYPES",
    "DEFAULT_MAX_REASONS",
    "DEFAULT_MAX_SERIES",
    "DEFAULT_MAX_STEP_KEYS",
    "DURATION_BUCKETS_S",
    "MAX_JOB_TYPES_ENV",
    "MAX_REASONS_ENV",
    "MAX_SERIES_ENV",
    "MAX_STEP_KEYS_ENV",
    "OTHER_STEP_KEY",
    "STEP_DURATION",
    "ClosedStep",
    "Committed",
    "FinishedAttempt",
    "StepMetrics",
    "max_series_from_environment",
    "max_step_keys_from_environment",
]

STEP_DURATION = "otel_jobsteps.step.duration"
ATTEMPTS = "otel_jobsteps.attempts"
# Jobs run from milliseconds to an hour: 10 ms ... 1 h.
DURATION_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    1800.0, 3600.0,
)  # fmt: skip
# Step keys of a job type beyond the bound are recorded under this one value (job types,
# domains and reasons beyond theirs too).
OTHER_STEP_KEY = "__other__"
DEFAULT_MAX_STEP_KEYS = 100
MAX_STEP_KEYS_ENV = "OTEL_JOBSTEPS_METRICS_MAX_STEP_KEYS"
# Distinct (domain, job type) pairs and job.reason values kept: collect takes them from the
# network, and each kept one holds memory here for the process's life.
DEFAULT_MAX_JOB_TYPES = 200
MAX_JOB_TYPES_ENV = "OTEL_JOBSTEPS_METRICS_MAX_JOB_TYPES"
DEFAULT_MAX_REASONS = 50
MAX_REASONS_ENV = "OTEL_JOBSTEPS_METRICS_MAX_REASONS"
# Label sets per gauge of serve's scrape (read from the tables each time, so nothing is held):
# the rest are added up into one OTHER_STEP_KEY series.
DEFAULT_MAX_SERIES = 1000
MAX_SERIES_ENV = "OTEL_JOBSTEPS_METRICS_MAX_SERIES"
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
        steps: Iterable[tuple[str | None, str | None, str | None]],
        attempts: Iterable[tuple[str, str, int]],
    ) -> Committed:
        """This, less the steps (trace id, span id, step key) and attempts counted
        before. A step counted before is known by its span; failing that (a derivation merged
        two spans of its key into one row, under the other span), by its trace and key: each
        counted step cancels one of these, so a row is counted once whichever span it has (and
        with the status it was counted with first: counters never go back)."""
        old_attempts = set(attempts)
        steps = list(steps)
        if not steps and not old_attempts:
            return self  # nothing counted before: rows stay unread until recorded
        by_span: dict[tuple[str | None, str | None], list[tuple[Any, ...]]] = {}
        for trace, span, key in steps:
            by_span.setdefault((trace, span), []).append((trace, key))
        fresh = []
        for s in self.closed_steps():
            counted = by_span.get((s.trace_id, s.span_id))
            if counted:
                counted.pop()
            else:
                fresh.append(s)
        # Counted steps whose span has no row now.
        others = Counter(group for groups in by_span.values() for group in groups)
        kept = []
        for s in fresh:
            same = (s.trace_id, s.step_key)
            if others[same] > 0:
                others[same] -= 1
            else:
                kept.append(s)
        return Committed(
            kept,
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
    return _bound(value, MAX_STEP_KEYS_ENV, DEFAULT_MAX_STEP_KEYS, "max_step_keys")


def max_series_from_environment(value: int | None) -> int:
    """``value``, else ``OTEL_JOBSTEPS_METRICS_MAX_SERIES``, else the default (>= 1)."""
    return _bound(value, MAX_SERIES_ENV, DEFAULT_MAX_SERIES, "max_series")


def _bound(value: int | None, variable: str, default: int, name: str) -> int:
    """``value``, else the environment ``variable``, else ``default``; positive."""
    if value is None:
        raw = os.environ.get(variable, "")
        try:
            value = int(raw) if raw else default
        except ValueError:
            message = f"{variable} must be an integer, got {raw!r}"
            raise ConfigurationError(message) from None
    if value < 1:
        raise ConfigurationError(f"{name} must be positive, got {value!r}")
    return value


# A pending aggregation: one count per bucket (the last above 1 h), then the sum, min and max,
# 1 if the step key is folded, 1 if the job type (or domain) is, and the attribute values
# counted (maybe folded).
_BUCKETS = len(DURATION_BUCKETS_S) + 1
_SUM, _MIN, _MAX, _FOLDED, _TYPE_FOLDED, _COUNTED = range(_BUCKETS, _BUCKETS + 6)
_StepValues = tuple[str, str | None, str, str]


class _SdkHistogram:
    """Merges step durations aggregated here into the SDK's own aggregations of the histogram.

    The SDK's ``record()`` costs some 10 us (measurement, attribute cleaning and hashing per
    reader); counting a step into plain lists here costs about 1 us, and the counts are added to
    the SDK's explicit-bucket aggregations when a reader collects: the reader exports the same
    points. This reads SDK internals (1.45): `usable` says whether they are as expected, and
    every storage's aggregation is checked to be these exact buckets with min and max; if not,
    the caller records through ``record()``.
    """

    def __init__(self, histogram: object) -> None:
        self._histogram = histogram
        self._instrument: Any = None  # the SDK's instrument adopted (behind the API's proxy)
        self._storages: Any = None  # the readers' storages counted for (checked when adopted)
        self.usable = False

    def _consumer(self) -> Any:
        # The global MeterProvider's proxy instrument gets its real one when it is set.
        instrument = getattr(self._histogram, "_real_instrument", None) or self._histogram
        return instrument, getattr(instrument, "_measurement_consumer", None)

    def current(self) -> bool:
        """Whether the readers are still those adopted (none added or removed since)."""
        return getattr(self._consumer()[1], "_reader_storages", None) is self._storages

    def adopt(self) -> None:
        """Count for the readers there are now: `usable` if each one's aggregation is known."""
        self._instrument, consumer = self._consumer()
        self._storages = getattr(consumer, "_reader_storages", None)
        self.usable = self._check(consumer, self._storages)

    def _check(self, consumer: Any, storages: Any) -> bool:
        try:
            if not isinstance(self._instrument, SdkHistogram) or not isinstance(storages, dict):
                return False
            if isinstance(consumer._sdk_config.exemplar_filter, AlwaysOnExemplarFilter):
                return False  # record() would offer every measurement as an exemplar
            return all(
                self._compatible(match)
                for storage in storages.values()
                for match in storage._get_or_init_view_instrument_match(self._instrument)
            )
        except (AttributeError, TypeError, KeyError):  # another SDK's internals
            return False

    def _compatible(self, match: Any) -> bool:
        view = match._view
        factory = view._aggregation
        if isinstance(factory, DefaultAggregation):
            factory = match._instrument_class_aggregation[self._instrument.__class__]
        probe = factory._create_aggregation(
            self._instrument, {}, view._exemplar_reservoir_factory, 0
        )
        return (
            isinstance(probe, _ExplicitBucketHistogramAggregation)
            and probe._boundaries == DURATION_BUCKETS_S
            and probe._record_min_max
        )

    def merge(self, pending: dict[_StepValues, list[Any]]) -> None:
        """Add ``pending`` to every reader's aggregation, as ``record()`` of each value would
        have."""
        for storage in self._storages.values():
            for match in storage._get_or_init_view_instrument_match(self._instrument):
                keys = match._view._attribute_keys
                with match._lock:
                    for acc in pending.values():
                        attributes = _step_attributes(acc[_COUNTED])
                        if keys is not None:
                            attributes = {k: v for k, v in attributes.items() if k in keys}
                        aggregation = match._get_or_create_aggregation(
                            _hash_attributes(attributes), attributes
                        )
                        _add_counts(aggregation, acc)


def _add_counts(aggregation: Any, acc: list[Any]) -> None:
    """What ``record()`` of each counted value does to an explicit-bucket aggregation."""
    with aggregation._lock:
        if aggregation._value is None:
            aggregation._value = aggregation._get_empty_bucket_counts()
        counts = aggregation._value
        for index in range(_BUCKETS):
            counts[index] += acc[index]
        aggregation._sum += acc[_SUM]
        aggregation._min = min(aggregation._min, acc[_MIN])
        aggregation._max = max(aggregation._max, acc[_MAX])


def _step_attributes(values: _StepValues) -> dict[str, str]:
    domain, job_type, key, status = values
    attributes = {JOB_DOMAIN: domain, JOB_STEP_KEY: key, JOB_STEP_STATUS: status}
    if job_type is not None:
        attributes[JOB_TYPE] = job_type
    return attributes


class StepMetrics:
    """The step duration histogram and the attempts counter; step keys bounded per job type,
    job types (with their domains) and reasons per process, the rest folded to `OTHER_STEP_KEY`.

    Both are counted here, on the thread that committed, and handed to the SDK when it collects
    (the attempts through an observable counter, the durations merged into the histogram's
    aggregations): an SDK measurement costs some 10 us, a count here about one.
    """

    def __init__(
        self,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        max_step_keys: int | None = None,
        on_folded: Callable[[int], None] = lambda count: None,
        max_job_types: int | None = None,
        max_reasons: int | None = None,
        on_folded_values: Callable[[int], None] = lambda count: None,
    ) -> None:
        meter = metrics.get_meter("otel_jobsteps", meter_provider=meter_provider)
        self._duration = meter.create_histogram(
            STEP_DURATION,
            unit="s",
            description="Duration of committed steps, by job type, step key and status",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S,
        )
        self._sdk = _SdkHistogram(self._duration)
        # (domain, job type, status, reason) -> attempts; several threads record in collect.
        self._attempt_counts: dict[tuple[str, str | None, str, str | None], int] = {}
        # (domain, job type, step key, status) -> counted durations not yet in the SDK.
        self._pending: dict[_StepValues, list[Any]] = {}
        self._lock = threading.Lock()
        self._merging = threading.Lock()  # one merge at a time, into the storages counted for
        ref = weakref.ref(self)  # the MeterProvider must not keep this alive

        def observe(_options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
            step_metrics = ref()
            return [] if step_metrics is None else step_metrics._collected()

        meter.create_observable_counter(
            ATTEMPTS,
            [observe],
            unit="{attempt}",
            description="Finished attempts committed, by job type, status and reason",
        )
        self._max_step_keys = max_step_keys_from_environment(max_step_keys)
        self._on_folded = on_folded  # counts steps recorded under OTHER_STEP_KEY
        self._keys: dict[str | None, set[str]] = {}
        self._max_job_types = _bound(
            max_job_types, MAX_JOB_TYPES_ENV, DEFAULT_MAX_JOB_TYPES, "max_job_types"
        )
        self._max_reasons = _bound(max_reasons, MAX_REASONS_ENV, DEFAULT_MAX_REASONS, "max_reasons")
        # Counts steps and attempts recorded with a folded job type, domain or reason.
        self._on_folded_values = on_folded_values
        self._types: set[tuple[str, str | None]] = set()  # (domain, job type) pairs kept
        self._domains: set[str] = set()  # the domains of the kept types
        self._reasons: set[str] = set()
        # Attribute dicts by their values: a batch's steps mostly repeat a few.
        self._step_attributes: dict[tuple[str, str | None, str, str], dict[str, str]] = {}

    def record(self, committed: Committed) -> None:
        """Record what one committed transaction changed (nothing while metrics are off)."""
        if _records_nothing(self._duration):
            return
        if committed.steps or committed.step_rows:
            if not self._sdk.current():  # readers added or removed: what is counted goes first
                with self._merging:
                    self._merge_pending()
                    self._sdk.adopt()
            if self._sdk.usable:
                self._count_steps(committed)
            else:
                self._record_steps(committed.closed_steps())
        if committed.attempts or committed.log_rows:
            counts = self._attempt_counts
            folded = 0
            with self._lock:
                finished: Iterable[FinishedAttempt | JobLogRow] = chain(
                    committed.attempts, committed.log_rows
                )
                for a in finished:
                    (domain, job_type), type_folded = self._bounded_type(a.domain, a.job_type)
                    reason, reason_folded = self._bounded_reason(a.reason or None)
                    counted = (domain, job_type, a.status, reason)
                    counts[counted] = counts.get(counted, 0) + 1
                    folded += type_folded or reason_folded
            if folded:
                self._on_folded_values(folded)

    def _count_steps(self, committed: Committed) -> None:
        """Count durations into the pending buckets (merged into the SDK when it collects)."""
        folded = types_folded = 0
        with self._lock:
            pending = self._pending

            def count(values: _StepValues, seconds: float) -> None:
                nonlocal folded, types_folded
                acc = pending.get(values)
                if acc is None:
                    acc = self._pending_for(pending, values)
                if seconds < 0.0:
                    seconds = 0.0
                acc[bisect_left(DURATION_BUCKETS_S, seconds)] += 1
                acc[_SUM] += seconds
                if seconds < acc[_MIN]:
                    acc[_MIN] = seconds
                if seconds > acc[_MAX]:
                    acc[_MAX] = seconds
                folded += acc[_FOLDED]
                types_folded += acc[_TYPE_FOLDED]

            for step in committed.steps:
                count((step.domain, step.job_type, step.step_key or "", step.status), step.seconds)
            for row in committed.step_rows:
                created = row.created_us
                count(
                    (row.domain, row.job_type, row.step_key or "", row.step_status or ""),
                    ((row.ended_us or created) - created) / 1e6,
                )
        if folded:
            self._on_folded(folded)
        if types_folded:
            self._on_folded_values(types_folded)

    def _pending_for(self, pending: dict[_StepValues, list[Any]], values: _StepValues) -> list[Any]:
        """The pending counts of ``values`` as recorded (maybe folded), kept under those: buckets,
        sum, min, max, whether the key and the type are folded, the attributes' values. Folded
        values share their one entry, so what is pending stays within the bounds too."""
        domain, job_type, step_key, status = values
        (domain, job_type), type_folded = self._bounded_type(domain, job_type)
        key = self._bounded_key(job_type, step_key)
        counted = (domain, job_type, key, status)
        acc = pending.get(counted)
        if acc is None:
            flags = [int(key is OTHER_STEP_KEY), int(type_folded)]
            acc = pending[counted] = [0] * _BUCKETS + [0.0, math.inf, -math.inf, *flags, counted]
        return acc

    def _record_steps(self, steps: list[ClosedStep]) -> None:
        """Through the SDK's ``record()``: a MeterProvider whose aggregations are not known."""
        folded = types_folded = 0
        record_duration = self._duration.record
        for step in steps:
            (domain, job_type), type_folded = self._bounded_type(step.domain, step.job_type)
            types_folded += type_folded
            step = step._replace(domain=domain, job_type=job_type)
            key = self._bounded_key(job_type, step.step_key or "")
            folded += key is OTHER_STEP_KEY
            record_duration(max(step.seconds, 0.0), self._attributes(step, key))
        if folded:
            self._on_folded(folded)
        if types_folded:
            self._on_folded_values(types_folded)

    def _merge_pending(self) -> None:
        """``_merging`` held: the pending durations into the storages they were counted for."""
        with self._lock:
            pending, self._pending = self._pending, {}
        if pending:
            self._sdk.merge(pending)

    def _collected(self) -> list[metrics.Observation]:
        """A reader collects: the pending durations go into the SDK, the attempts are observed."""
        with self._merging:
            self._merge_pending()
        return self._attempt_observations()

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

    def _bounded_type(
        self, domain: str, job_type: str | None
    ) -> tuple[tuple[str, str | None], bool]:
        """(domain, job type) as recorded, and whether folded: a pair beyond the bound keeps
        its domain if a kept pair has it, else both become `OTHER_STEP_KEY`."""
        pair = (domain, job_type)
        if pair in self._types:
            return pair, False
        if len(self._types) < self._max_job_types:
            self._types.add(pair)
            self._domains.add(domain)
            return pair, False
        folded = (domain if domain in self._domains else OTHER_STEP_KEY, OTHER_STEP_KEY)
        return folded, True

    def _bounded_reason(self, reason: str | None) -> tuple[str | None, bool]:
        if reason is None or reason in self._reasons:
            return reason, False
        if len(self._reasons) < self._max_reasons:
            self._reasons.add(reason)
            return reason, False
        return OTHER_STEP_KEY, True

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
