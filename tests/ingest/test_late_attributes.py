"""Job attributes set after the job span started: one rule, the same rows through both doors.

A job's identity, limits and tags are read at its job span's start; a job span that names no
job then is read at its end (its attempt written then); a value changed after it was read is
ignored and counted (``late_attributes``). The processor sees each start; collect sees it in
the start marker (here built from what the span held at its start, as a marker sender does)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.common._internal import _encode_attributes
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from otel_jobsteps import JobStepsProcessor
from otel_jobsteps._ingest.decode import decode_protobuf
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging
from otel_jobsteps.attributes import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_ID,
    JOB_STEP_KEY,
    JOB_TIME_LIMIT,
    JOB_TYPE,
)
from otel_jobsteps.testing import InMemoryStore
from tests.ingest.collector import CollectorFactory, table_rows
from tests.ingest.requests import post, proto_spans, request_of
from tests.ingest.stories import Recording
from tests.ops.test_metrics import points

DOMAIN = "late"
MS = 1_000_000  # nanoseconds

# Each case: its name, and what the job sets on its job span after starting it (None: the job
# span starts without any job.* attribute and is given them all there).
Change = dict[str, Any] | None
CASES: dict[str, Change] = {
    "attempt": {JOB_ATTEMPT: 2},
    "id": {JOB_ID: "other"},
    "type": {JOB_TYPE: "t2"},
    "time_limit": {JOB_TIME_LIMIT: 0.001},  # the start had none: it would fail the job
    "no_steps": {JOB_ATTEMPT: 3},  # nothing between its start and end
    "named_at_end": None,
    "attempt_at_end": {JOB_ATTEMPT: 1},  # no valid job at its start (counted invalid then)
}
READ_AT_END = ("named_at_end", "attempt_at_end")
LATE = len(CASES) - len(READ_AT_END)


class StartAttributes(SpanProcessor):
    """What each span held as it started (a start marker sender's copy)."""

    def __init__(self) -> None:
        self.at_start: dict[int, dict[str, Any]] = {}

    def on_start(self, span: SdkSpan, parent_context: Context | None = None) -> None:
        self.at_start[span.context.span_id] = dict(span.attributes or {})

    def on_end(self, span: ReadableSpan) -> None:
        pass


def _job(tracer: Tracer, suffix: str, case: str, change: Change) -> None:
    names = {JOB_DOMAIN: DOMAIN, JOB_ID: f"{case}{suffix}", JOB_TYPE: "t1", JOB_ATTEMPT: 1}
    late = names if change is None else dict(change)
    if change is not None and JOB_ID in change:
        late[JOB_ID] = f"{change[JOB_ID]}{suffix}"
    start = {} if change is None else names
    if case == "attempt_at_end":
        start = {k: v for k, v in names.items() if k != JOB_ATTEMPT}
    at = time.time_ns()
    job = tracer.start_span(f"job {case}", attributes=start, start_time=at)
    with trace.use_span(job, end_on_exit=False):
        if case != "no_steps":
            _step(tracer, "RENDER", at + MS, at + 2 * MS)
        job.set_attributes(late)
        if case != "no_steps":
            _step(tracer, "SAVE", at + 3 * MS, at + 10 * MS)  # past the time limit set late
    job.end(end_time=at + 11 * MS)


def _step(tracer: Tracer, key: str, start_ns: int, end_ns: int) -> None:
    """A step span with explicit times: a step's length needs no sleep."""
    span = tracer.start_span(key.lower(), attributes={JOB_STEP_KEY: key}, start_time=start_ns)
    span.end(end_time=end_ns)


def story(tracer: Tracer, suffix: str) -> None:
    for case, change in CASES.items():
        _job(tracer, suffix, case, change)


def _markers(spans: list[Span], at_start: dict[int, dict[str, Any]]) -> list[Span]:
    """A start marker of each span (end time 0) with the attributes it had at its start."""
    markers = []
    for span in spans:
        marker = Span()
        marker.CopyFrom(span)
        marker.ClearField("events")
        marker.ClearField("status")
        marker.ClearField("attributes")
        marker.end_time_unix_nano = 0
        start = at_start[int.from_bytes(span.span_id, "big")]
        marker.attributes.extend(_encode_attributes(start) or [])
        markers.append(marker)
    return markers


@pytest.fixture
def staging(second_dsn: str) -> Iterator[Staging]:
    found = Staging(CollectSettings(second_dsn, settle_after_s=0.0, connections=1))
    yield found
    found.close()


Deliver = Callable[[list[Span]], None]


def _deliver(staging: Staging) -> Deliver:
    def deliver(spans: list[Span]) -> None:
        decoded = decode_protobuf(request_of(spans).SerializeToString())
        staging.receive(decoded.spans, decoded.wire)

    return deliver


def _told(recording: Recording) -> tuple[str, list[Span], dict[int, dict[str, Any]]]:
    starts = StartAttributes()
    recording.provider.add_span_processor(starts)
    suffix = f"-{uuid.uuid4().hex[:8]}"
    spans = recording.spans(story, suffix)
    return suffix, spans, starts.at_start


@pytest.mark.parametrize("requests", ["markers first", "one request", "each span alone"])
def test_late_job_attributes_give_the_same_rows_and_counts_through_both_doors(
    recording: Recording, staging: Staging, dsn: str, second_dsn: str, requests: str
) -> None:
    suffix, spans, at_start = _told(recording)
    markers = _markers(spans, at_start)
    deliver = _deliver(staging)
    if requests == "markers first":
        deliver(markers)
        deliver(spans)
    elif requests == "one request":
        deliver(markers + spans)
    else:
        for span in markers + spans:
            deliver([span])
    staging.settle()
    live = table_rows(dsn, f"%{suffix}")
    assert table_rows(second_dsn, f"%{suffix}") == live
    events, logs = live
    # The values each job started with stand: attempt 1, type t1, its first id, no time limit.
    assert {(row[1], row[4]) for row in logs} == {
        (f"{case}{suffix}", "COMPLETED") for case in CASES
    }
    # A job named only at its end: its attempt, without the steps that ran before; the others
    # have theirs.
    stepped = {c for c in CASES if c not in READ_AT_END and c != "no_steps"}
    assert {row[1] for row in events} == {f"{case}{suffix}" for case in stepped}
    for stats in (recording.processor.stats(), staging.stats.snapshot()):
        assert (stats.get("late_attributes"), stats.get("invalid_job_span")) == (LATE, 1)


def test_without_start_markers_collect_reads_the_ended_spans_values(
    recording: Recording, staging: Staging, dsn: str, second_dsn: str
) -> None:
    # OTLP carries a span's final attributes only: without a start marker collect cannot know
    # what it started with, so it reads the ended span's (docs/design.md says so).
    suffix, spans, _ = _told(recording)
    _deliver(staging)(spans)
    _, logs = table_rows(second_dsn, f"%{suffix}")
    assert (f"attempt{suffix}", 2) in {(row[1], row[3]) for row in logs}
    assert staging.stats.snapshot().get("late_attributes") is None
    assert recording.processor.stats().get("late_attributes") == LATE


def test_both_doors_export_the_count_as_a_problems_metric(
    start_collect: CollectorFactory, second_dsn: str
) -> None:
    reader = InMemoryMetricReader()
    processor = JobStepsProcessor(
        store=InMemoryStore(), meter_provider=MeterProvider(metric_readers=[reader])
    )
    starts = StartAttributes()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    for added in (processor, starts, SimpleSpanProcessor(exporter)):
        provider.add_span_processor(added)
    _job(provider.get_tracer("tests"), "-metric", "attempt", CASES["attempt"])
    assert processor.force_flush(10_000)
    provider.shutdown()
    live = {p.attributes["kind"]: p.value for p in points(reader, "otel_jobsteps.problems")}
    assert live == {"late_attributes": 1}

    collector = start_collect(second_dsn)
    spans = proto_spans(exporter.get_finished_spans())
    for part in (_markers(spans, starts.at_start), spans):
        reply = post(collector.traces_url, request_of(part).SerializeToString())
        assert reply.status_code == 200
    scraped = httpx.get(f"{collector.url}/metrics").text
    assert 'otel_jobsteps_problems_total{kind="late_attributes"} 1.0' in scraped


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_the_processor_reads_the_start_values_with_either_writer(dsn: str, writer: str) -> None:
    processor = JobStepsProcessor(dsn, writer=writer)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    suffix = f"-{writer}"
    try:
        story(provider.get_tracer("tests"), suffix)
        assert processor.force_flush(10_000)
        assert processor.stats().get("late_attributes") == LATE
    finally:
        provider.shutdown()
    _, logs = table_rows(dsn, f"%{suffix}")
    assert {(row[1], row[2], row[3], row[4]) for row in logs} == {
        (f"{case}{suffix}", "t1", 1, "COMPLETED") for case in CASES
    }
