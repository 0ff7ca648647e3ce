"""The step histogram counted by StepMetrics and merged into the SDK when it collects exports
what the SDK's own ``record()`` of every step would have, whatever the readers and views."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.metrics import AlwaysOnExemplarFilter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    NumberDataPoint,
)
from opentelemetry.sdk.metrics.view import (
    Aggregation,
    ExplicitBucketHistogramAggregation,
    ExponentialBucketHistogramAggregation,
    View,
)

from otel_jobsteps._core.batch import EventRow
from otel_jobsteps._telemetry.metrics import (
    DURATION_BUCKETS_S,
    STEP_DURATION,
    ClosedStep,
    Committed,
    StepMetrics,
)

Readers = Callable[[], list[InMemoryMetricReader]]


def cumulative() -> list[InMemoryMetricReader]:
    return [InMemoryMetricReader()]


def delta_and_cumulative() -> list[InMemoryMetricReader]:
    delta: dict[type, AggregationTemporality] = {Histogram: AggregationTemporality.DELTA}
    return [InMemoryMetricReader(preferred_temporality=delta), InMemoryMetricReader()]


def exponential() -> list[InMemoryMetricReader]:
    preferred: dict[type, Aggregation] = {Histogram: ExponentialBucketHistogramAggregation()}
    return [InMemoryMetricReader(preferred_aggregation=preferred)]


def batches(seed: int) -> list[list[ClosedStep]]:
    """Random committed steps: durations on bucket bounds, beyond 1 h, zero, negative."""
    rnd = random.Random(seed)
    values = [0.0, -1.0, 0.01, 0.025, 3600.0, 7200.0]
    return [
        [
            ClosedStep(
                "t",
                "s",
                rnd.choice(["demo", "x"]),
                rnd.choice(["thumbnail", None]),
                rnd.choice(["RENDER", "SAVE", None]),
                rnd.choice(["COMPLETED", "FAILED"]),
                rnd.choice([*values, rnd.random() * 100]),
            )
            for _ in range(rnd.randint(1, 30))
        ]
        for _ in range(40)
    ]


def inserted(steps: list[ClosedStep]) -> list[EventRow]:
    """The same steps as rows a batch inserted closed (their times in microseconds)."""
    return [
        EventRow(s.domain, "job", s.job_type, 1, "STEP", s.step_key, s.status, None, None,
                 s.trace_id, s.span_id, None, 1_000_000, 1_000_000 + int(s.seconds * 1e6))
        for s in steps
    ]  # fmt: skip


def points(reader: InMemoryMetricReader) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """Every step-duration point but its times, by attributes."""
    data = reader.get_metrics_data()
    return {
        tuple(sorted((p.attributes or {}).items())): (
            type(metric.data).__name__,
            metric.unit,
            getattr(metric.data, "aggregation_temporality", None),
            p.count,
            pytest.approx(p.sum),
            tuple(getattr(p, "bucket_counts", ())),
            tuple(getattr(p, "explicit_bounds", ())),
            p.min,
            p.max,
        )
        for resource in (data.resource_metrics if data else ())
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == STEP_DURATION
        for p in metric.data.data_points
        if not isinstance(p, NumberDataPoint)
    }


def the_sdks_own(steps: list[ClosedStep], histogram: Any) -> None:
    """What StepMetrics would record through ``record()``, step by step."""
    for s in steps:
        attributes = {
            "job.domain": s.domain,
            "job.step.key": s.step_key or "",
            "job.step.status": s.status,
        }
        if s.job_type is not None:
            attributes["job.type"] = s.job_type
        histogram.record(max(s.seconds, 0.0), attributes)


@pytest.mark.parametrize("readers", [cumulative, delta_and_cumulative, exponential])
@pytest.mark.parametrize(
    "views",
    [
        pytest.param([], id="no-view"),
        pytest.param(
            [View(instrument_name=STEP_DURATION, attribute_keys={"job.step.key"})],
            id="view-keeps-one-attribute",
        ),
        pytest.param(
            [
                View(
                    instrument_name=STEP_DURATION,
                    aggregation=ExplicitBucketHistogramAggregation((1.0, 10.0)),
                )
            ],
            id="view-other-buckets",
        ),
    ],
)
def test_exported_points_are_the_sdks_own(readers: Readers, views: list[View]) -> None:
    ours, theirs = readers(), readers()
    metrics = StepMetrics(MeterProvider(metric_readers=ours, views=views))
    histogram = (
        MeterProvider(metric_readers=theirs, views=views)
        .get_meter("otel_jobsteps")
        .create_histogram(
            STEP_DURATION, unit="s", explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S
        )
    )
    for number, steps in enumerate(batches(7)):
        committed = Committed(steps) if number % 2 else Committed(step_rows=inserted(steps))
        metrics.record(committed)
        the_sdks_own(committed.closed_steps(), histogram)
        if number % 9 == 0:  # collections between batches, as a periodic reader does
            assert [points(r) for r in ours] == [points(r) for r in theirs]
    assert [points(r) for r in ours] == [points(r) for r in theirs]


def test_counting_here_is_used_only_where_the_aggregation_is_known() -> None:
    def usable(**options: Any) -> bool:
        sdk = StepMetrics(MeterProvider(**options))._sdk
        sdk.adopt()
        return sdk.usable

    assert usable(metric_readers=[InMemoryMetricReader()])
    assert not usable(metric_readers=exponential())
    assert not usable(
        metric_readers=[InMemoryMetricReader()], exemplar_filter=AlwaysOnExemplarFilter()
    )


def test_a_reader_added_later_gets_what_is_recorded_after() -> None:
    first, later = InMemoryMetricReader(), InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[first])
    metrics = StepMetrics(provider)
    step = ClosedStep("t", "s", "demo", "thumbnail", "RENDER", "COMPLETED", 0.5)
    metrics.record(Committed([step]))
    provider.add_metric_reader(later)
    metrics.record(Committed([step, step]))
    assert [p[3] for p in points(first).values()] == [3]
    assert [p[3] for p in points(later).values()] == [2]


GLOBAL_PROVIDER_SET_LATER = """
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from otel_jobsteps._telemetry.metrics import ClosedStep, Committed, StepMetrics

step_metrics = StepMetrics()  # before the application sets its global MeterProvider
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
step = ClosedStep("t", "s", "demo", "thumbnail", "RENDER", "COMPLETED", 0.5)
step_metrics.record(Committed([step, step]))
(point,) = [p for r in reader.get_metrics_data().resource_metrics for s in r.scope_metrics
            for m in s.metrics if m.name == "otel_jobsteps.step.duration"
            for p in m.data.data_points]
print(point.count, step_metrics._sdk.usable)
"""


def test_a_global_provider_set_later_is_counted_here_too() -> None:
    """Its own process: the global MeterProvider can be set once."""
    done = subprocess.run(
        [sys.executable, "-c", GLOBAL_PROVIDER_SET_LATER],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "True"]
