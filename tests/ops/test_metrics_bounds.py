"""The step metrics' memory is bounded: job types (with their domains) and reasons beyond their
bounds are folded to one value and counted, as step keys are."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_jobsteps._telemetry.metrics import (
    DEFAULT_MAX_JOB_TYPES,
    DEFAULT_MAX_REASONS,
    MAX_JOB_TYPES_ENV,
    OTHER_STEP_KEY,
    ClosedStep,
    Committed,
    FinishedAttempt,
    StepMetrics,
)
from otel_jobsteps.errors import ConfigurationError
from tests.ops.test_metrics import attempt_counts, step_counts

X = OTHER_STEP_KEY  # folded


def metered(**bounds: int) -> tuple[StepMetrics, InMemoryMetricReader, list[int]]:
    reader = InMemoryMetricReader()
    folded: list[int] = []
    metrics = StepMetrics(
        MeterProvider(metric_readers=[reader]), on_folded_values=folded.append, **bounds
    )
    return metrics, reader, folded


def step(domain: str, job_type: str | None, key: str = "S") -> ClosedStep:
    return ClosedStep(None, None, domain, job_type, key, "COMPLETED", 1.0)


def attempt(domain: str, job_type: str | None, reason: str | None) -> FinishedAttempt:
    return FinishedAttempt(domain, "1", 1, job_type, "FAILED", reason)


def test_job_types_beyond_the_bound_are_folded_keeping_a_known_domain() -> None:
    metrics, reader, folded = metered(max_job_types=2)
    metrics.record(Committed([step("a", "t1"), step("a", "t2"), step("a", "t3"), step("b", "t4")]))
    metrics.record(Committed(attempts=[attempt("a", "t1", None), attempt("c", "t5", None)]))
    metrics.record(Committed([step("a", "t1"), step("z", None)]))
    assert step_counts(reader) == {
        ("a", "t1", "S", "COMPLETED"): 2,
        ("a", "t2", "S", "COMPLETED"): 1,
        ("a", X, "S", "COMPLETED"): 1,  # a kept domain stays
        (X, X, "S", "COMPLETED"): 2,  # a new domain is folded with its type
    }
    assert attempt_counts(reader) == {("a", "t1", "FAILED", None): 1, (X, X, "FAILED", None): 1}
    assert sum(folded) == 4


def test_reasons_beyond_the_bound_are_folded() -> None:
    metrics, reader, folded = metered(max_reasons=2)
    reasons = ["error", "timeout", "boom-1", "boom-2", "error", None]
    metrics.record(Committed(attempts=[attempt("a", "t", r) for r in reasons]))
    assert attempt_counts(reader) == {
        ("a", "t", "FAILED", "error"): 2,
        ("a", "t", "FAILED", "timeout"): 1,
        ("a", "t", "FAILED", X): 2,
        ("a", "t", "FAILED", None): 1,
    }
    assert sum(folded) == 2


def test_a_flood_of_distinct_types_and_reasons_keeps_the_maps_bounded() -> None:
    """The review's case: 200,000 distinct job types and reasons (collect takes them from the
    network) held 102 MiB; now what is kept stays at the bounds whatever comes."""
    metrics, reader, folded = metered()
    total = 20_000
    for start in range(0, total, 1000):
        numbers = range(start, start + 1000)
        metrics.record(
            Committed(
                [step("d", f"type-{n}") for n in numbers],
                [attempt("d", "type-0", f"reason-{n}") for n in numbers],
            )
        )
        if start % 5000 == 0:
            reader.collect()  # as a scrape would, now and then
    # Between scrapes too: what waits for the next one is within the bounds.
    assert len(metrics._pending) <= DEFAULT_MAX_JOB_TYPES + 1
    assert len(metrics._types) == DEFAULT_MAX_JOB_TYPES
    assert len(metrics._keys) == DEFAULT_MAX_JOB_TYPES + 1  # the folded type's keys too
    assert len(metrics._reasons) == DEFAULT_MAX_REASONS
    assert len(metrics._attempt_counts) == DEFAULT_MAX_REASONS + 1
    assert sum(step_counts(reader).values()) == sum(attempt_counts(reader).values()) == total
    assert sum(folded) == 2 * total - DEFAULT_MAX_JOB_TYPES - DEFAULT_MAX_REASONS


def test_the_bounds_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_JOB_TYPES_ENV, "1")
    metrics, reader, _ = metered()
    metrics.record(Committed([step("a", "t1"), step("a", "t2")]))
    assert step_counts(reader) == {("a", "t1", "S", "COMPLETED"): 1, ("a", X, "S", "COMPLETED"): 1}
    monkeypatch.setenv(MAX_JOB_TYPES_ENV, "none")
    with pytest.raises(ConfigurationError, match=MAX_JOB_TYPES_ENV):
        metered()
    monkeypatch.delenv(MAX_JOB_TYPES_ENV)
    with pytest.raises(ConfigurationError, match="max_reasons"):
        metered(max_reasons=0)
