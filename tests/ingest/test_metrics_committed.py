"""The attempt and step metrics count what the rows say, once each, by both doors: a job that
fails once and is retried is one FAILED ``retry`` attempt and one COMPLETED, never "abandoned"
because its retry's start marker reached collect before the first attempt's end."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client.parser import text_string_to_metric_families

from otel_jobsteps import JobStepsProcessor, job_attempt, step
from otel_jobsteps._core.vocabulary import OUTCOME_RETRY
from otel_jobsteps._ingest.decode import decode_protobuf
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging
from otel_jobsteps._telemetry.metrics import StepMetrics
from otel_jobsteps.attributes import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_ID,
    JOB_OUTCOME,
    JOB_STEP_KEY,
    JOB_TYPE,
)
from tests.helpers import wait_until
from tests.ingest import test_node_bullmq as bullmq
from tests.ingest.collector import CollectorFactory
from tests.ingest.requests import proto_spans, request_of, start_markers
from tests.ops.test_metrics import ATTEMPT_LABELS, STEP_LABELS, attempt_counts, points, step_counts
from tests.queues.support import assert_retried_then_completed

# The Node example's fixtures, used here too.
node_example, queue, node_worker = bullmq.node_example, bullmq.queue, bullmq.node_worker

Counts = dict[tuple[Any, ...], int]

_ATTEMPT_ROWS = (
    "SELECT domain, job_type, status, reason, count(*) FROM job_log"
    " WHERE domain = %s GROUP BY 1, 2, 3, 4"
)
_STEP_ROWS = (
    "SELECT domain, job_type, step_key, step_status, count(*) FROM job_event"
    " WHERE domain = %s AND type = 'STEP' AND ended_at IS NOT NULL GROUP BY 1, 2, 3, 4"
)


def _rows(dsn: str, query: str, domain: str) -> Counts:
    with psycopg.connect(dsn) as conn:
        return {tuple(row[:-1]): row[-1] for row in conn.execute(query, (domain,))}  # type: ignore[arg-type]


def _scraped(url: str, domain: str) -> tuple[Counts, Counts]:
    """(attempts by domain, type, status, reason; closed steps by domain, type, key, status)
    of the domain, from collect's /metrics."""
    attempts: Counter[tuple[Any, ...]] = Counter()
    steps: Counter[tuple[Any, ...]] = Counter()
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        for sample in family.samples:
            labels = sample.labels
            if labels.get("job_domain") != domain:
                continue
            if sample.name == "otel_jobsteps_attempts_total":
                key = ("job_domain", "job_type", "job_status", "job_reason")
                attempts[tuple(labels.get(k) or None for k in key)] += int(sample.value)
            elif sample.name == "otel_jobsteps_step_duration_seconds_count":
                key = ("job_domain", "job_type", "job_step_key", "job_step_status")
                steps[tuple(labels.get(k) or None for k in key)] += int(sample.value)
    return dict(attempts), dict(steps)


def test_collects_metrics_count_the_rows_of_a_retried_node_job(
    start_collect: CollectorFactory, node_worker: bullmq.NodeWorker, queue: str, dsn: str
) -> None:
    # The example as shipped: start markers on, so attempt 2's start may arrive before
    # attempt 1's end; its rows are FAILED retry then COMPLETED, and so must its metrics be.
    collector = start_collect(dsn)
    node_worker(collector)
    bullmq.enqueue(queue, "flaky", "flaky-metrics", attempts=2)
    assert_retried_then_completed(
        dsn, queue, "flaky-metrics", save_error="Error: disk full", job_type="flaky"
    )
    rows = (_rows(dsn, _ATTEMPT_ROWS, queue), _rows(dsn, _STEP_ROWS, queue))
    assert rows[0] == {
        (queue, "flaky", "FAILED", "retry"): 1,
        (queue, "flaky", "COMPLETED", None): 1,
    }
    assert wait_until(
        lambda: _scraped(collector.url, queue) == rows or None,
        what=f"collect's metrics to equal the rows {rows}, not {_scraped(collector.url, queue)}",
    )


def test_the_processors_metrics_count_the_rows_of_a_retried_job(dsn: str) -> None:
    reader = InMemoryMetricReader()
    processor = JobStepsProcessor(dsn, meter_provider=MeterProvider(metric_readers=[reader]))
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests")
    try:
        with job_attempt("metrics-live", "j1", "flaky", tracer=tracer) as span:
            with step("RENDER", tracer=tracer):
                pass
            try:
                with step("SAVE", tracer=tracer):
                    raise OSError("disk full")
            except OSError:
                span.set_attribute(JOB_OUTCOME, OUTCOME_RETRY)
        with job_attempt("metrics-live", "j1", "flaky", attempts_made=1, tracer=tracer):
            with step("RENDER", tracer=tracer), step("SAVE", tracer=tracer):
                pass
        assert processor.force_flush(10_000)
    finally:
        provider.shutdown()
    attempts = {
        tuple(p.attributes.get(k) for k in ATTEMPT_LABELS): p.value
        for p in points(reader, "otel_jobsteps.attempts")
    }
    steps = {
        tuple(p.attributes.get(k) for k in STEP_LABELS): p.count
        for p in points(reader, "otel_jobsteps.step.duration")
    }
    assert attempts == _rows(dsn, _ATTEMPT_ROWS, "metrics-live")
    assert steps == _rows(dsn, _STEP_ROWS, "metrics-live")
    assert attempts == {
        ("metrics-live", "flaky", "FAILED", "retry"): 1,
        ("metrics-live", "flaky", "COMPLETED", None): 1,
    }


def _retried_job(job_id: str) -> dict[str, Span]:
    """Attempt 1 (0..10 s, RENDER, FAILED with outcome retry) and attempt 2 (20..30 s, RENDER)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    at = 1_764_000_000 * 10**9
    for number in (1, 2):
        names = {JOB_DOMAIN: "counted", JOB_ID: job_id, JOB_TYPE: "t", JOB_ATTEMPT: number}
        begin = at + (number - 1) * 20 * 10**9
        job = tracer.start_span(f"job{number}", attributes=names, start_time=begin)
        inside = trace.set_span_in_context(job)
        render = tracer.start_span(
            f"render{number}", inside, attributes={JOB_STEP_KEY: "RENDER"}, start_time=begin + 1
        )
        render.end(begin + 5 * 10**9)
        if number == 1:
            job.set_attribute(JOB_OUTCOME, OUTCOME_RETRY)
            job.set_status(StatusCode.ERROR, "retry")
        job.end(begin + 10 * 10**9)
    provider.shutdown()
    return {span.name: span for span in proto_spans(exporter.get_finished_spans())}


@pytest.fixture
def counting(
    second_dsn: str,
) -> Iterator[tuple[Staging, InMemoryMetricReader]]:
    reader = InMemoryMetricReader()
    metrics = StepMetrics(MeterProvider(metric_readers=[reader]))
    settings = CollectSettings(second_dsn, connections=1, settle_after_s=0, settle_open_after_s=0)
    staging = Staging(settings, on_committed=metrics.record)
    yield staging, reader
    staging.close()


def _receive(staging: Staging, spans: list[Span]) -> None:
    decoded = decode_protobuf(request_of(spans).SerializeToString())
    staging.receive(decoded.spans, decoded.wire)


def _first_attempt_started(staging: Staging, job_id: str) -> dict[str, Span]:
    """The job's spans, attempt 1's start markers received (its job span and RENDER)."""
    spans = _retried_job(job_id)
    _receive(staging, start_markers([spans["job1"], spans["render1"]]))
    return spans


def test_a_retry_whose_start_arrives_before_the_first_attempts_end_counts_the_rows(
    counting: tuple[Staging, InMemoryMetricReader], second_dsn: str
) -> None:
    staging, reader = counting
    spans = _first_attempt_started(staging, "early-retry")
    _receive(staging, start_markers([spans["job2"]]))  # abandons attempt 1 for now
    assert _rows(second_dsn, _ATTEMPT_ROWS, "counted") == {
        ("counted", "t", "FAILED", "abandoned"): 1
    }
    assert attempt_counts(reader) == {}  # attempt 1 waits for its end: not counted yet
    _receive(staging, [spans["render1"], spans["job1"]])
    _receive(staging, [spans["render2"], spans["job2"]])
    rows = _rows(second_dsn, _ATTEMPT_ROWS, "counted")
    assert rows == {("counted", "t", "FAILED", "retry"): 1, ("counted", "t", "COMPLETED", None): 1}
    assert attempt_counts(reader) == rows
    assert step_counts(reader) == _rows(second_dsn, _STEP_ROWS, "counted")
    staging.settle()
    assert attempt_counts(reader) == rows  # counted once


def test_an_attempt_whose_end_never_comes_is_counted_when_it_settles(
    counting: tuple[Staging, InMemoryMetricReader], second_dsn: str
) -> None:
    staging, reader = counting
    spans = _first_attempt_started(staging, "never-ended")
    _receive(staging, [spans["render2"], spans["job2"]])
    assert attempt_counts(reader) == {("counted", "t", "COMPLETED", None): 1}
    staging.settle()  # attempt 1, pending, settles (the open settle time is 0 here)
    rows = _rows(second_dsn, _ATTEMPT_ROWS, "counted")
    assert rows == {
        ("counted", "t", "FAILED", "abandoned"): 1,
        ("counted", "t", "COMPLETED", None): 1,
    }
    assert attempt_counts(reader) == rows
    assert step_counts(reader) == _rows(second_dsn, _STEP_ROWS, "counted")
    staging.settle()
    assert attempt_counts(reader) == rows
