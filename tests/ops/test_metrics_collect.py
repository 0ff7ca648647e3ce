"""collect's step metrics agree with its rows where a request's answer is lost or a later span
changes which span a row came from."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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

from otel_jobsteps._ingest.decode import decode_protobuf
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging, StagingUnavailable
from otel_jobsteps._telemetry.metrics import StepMetrics
from otel_jobsteps.attributes import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID, JOB_STEP_KEY, JOB_TYPE
from tests.faults.proxy import FaultProxy
from tests.helpers import wait_until
from tests.ingest.requests import proto_spans, request_of
from tests.ingest.stories import Recording, seed_story
from tests.ops.test_metrics import SEED_ATTEMPTS, SEED_STEPS, attempt_counts, step_counts


@pytest.fixture
def metered() -> tuple[StepMetrics, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    return StepMetrics(MeterProvider(metric_readers=[reader])), reader


@pytest.fixture
def staging_for(metered: tuple[StepMetrics, InMemoryMetricReader]) -> Iterator[Any]:
    """Stagings on a DSN counting into ``metered``, closed after the test."""
    opened: list[Staging] = []

    def build(dsn: str) -> Staging:
        settings = CollectSettings(dsn, connections=1, connect_timeout_s=2)
        opened.append(Staging(settings, on_committed=metered[0].record))
        return opened[-1]

    yield build
    for staging in opened:
        staging.close()


def seed_spans(dsn: str, suffix: str) -> list[Span]:
    """The seed story's spans (its rows recorded into ``dsn`` by the processor)."""
    recording = Recording(dsn)
    try:
        return recording.spans(seed_story, suffix)
    finally:
        recording.close()


def receive(staging: Staging, spans: list[Span]) -> Any:
    decoded = decode_protobuf(request_of(spans).SerializeToString())
    return staging.receive(decoded.spans, decoded.wire)


@pytest.mark.parametrize("then", ["retry", "settle-pass"])
def test_a_request_whose_commit_landed_but_whose_answer_was_lost_counts_once(
    proxy: FaultProxy, dsn: str, second_dsn: str, staging_for: Any,
    metered: tuple[StepMetrics, InMemoryMetricReader], then: str,
) -> None:  # fmt: skip
    spans = seed_spans(dsn, "-lost")
    staging = staging_for(proxy.dsn_for(second_dsn))
    proxy.cut_when(server_sends=b"COMMIT\x00")  # the server commits, collect never hears it
    with pytest.raises(StagingUnavailable):
        receive(staging, spans)
    assert proxy.cuts == 1
    reader = metered[1]
    assert step_counts(reader) == {}
    if then == "settle-pass":  # no request comes: the next settle pass asks
        staging.settle()
    else:
        wait_until(lambda: not staging.resting(), what="collect's pause after the lost answer")
        receipt = receive(staging, spans)  # the exporter's retry: every span a duplicate
        assert (receipt.staged, receipt.duplicates) == (0, len(spans))
    assert staging.stats.snapshot()["commits_confirmed_after_error"] == 1
    assert step_counts(reader) == SEED_STEPS
    assert attempt_counts(reader) == SEED_ATTEMPTS


def test_a_request_whose_commit_did_not_land_counts_when_retried(
    proxy: FaultProxy, dsn: str, second_dsn: str, staging_for: Any,
    metered: tuple[StepMetrics, InMemoryMetricReader],
) -> None:  # fmt: skip
    spans = seed_spans(dsn, "-unlanded")
    staging = staging_for(proxy.dsn_for(second_dsn))
    proxy.cut_when(server_sends=b"INSERT")  # cut mid-transaction: the server rolls it back
    with pytest.raises(StagingUnavailable):
        receive(staging, spans)
    wait_until(lambda: not staging.resting(), what="collect's pause after the lost connection")
    assert receive(staging, spans).staged == len(spans)
    reader = metered[1]
    assert step_counts(reader) == SEED_STEPS
    assert attempt_counts(reader) == SEED_ATTEMPTS
    with psycopg.connect(second_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM job_log").fetchone() == (2,)


def overlapping_steps(job_id: str, *, failed: str = "") -> list[Span]:
    """A job span J (0..40 s) with two spans of step K: Y (10..30 s), then X (5..20 s) that
    started first (the ``failed`` one ends in error); the processor makes one K row of them."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    at = 1_764_000_000 * 10**9
    names = {JOB_DOMAIN: "d", JOB_ID: job_id, JOB_TYPE: "recount", JOB_ATTEMPT: 1}
    job = tracer.start_span("job", attributes=names, start_time=at)
    inside = trace.set_span_in_context(job)
    for name, start_s, end_s in (("Y", 10, 30), ("X", 5, 20)):
        child = tracer.start_span(
            name, inside, attributes={JOB_STEP_KEY: "K"}, start_time=at + start_s * 10**9
        )
        if name == failed:
            child.set_status(StatusCode.ERROR, "boom")
        child.end(at + end_s * 10**9)
    job.end(at + 40 * 10**9)
    provider.shutdown()
    by_name = {span.name: span for span in proto_spans(exporter.get_finished_spans())}
    return [by_name["job"], by_name["Y"], by_name["X"]]


@pytest.mark.parametrize("failed", ["", "Y", "X"])
def test_a_later_span_that_moves_a_step_row_to_another_span_does_not_count_it_again(
    second_dsn: str, staging_for: Any, metered: tuple[StepMetrics, InMemoryMetricReader],
    failed: str,
) -> None:  # fmt: skip
    job, y, x = overlapping_steps("recount-1", failed=failed)
    staging = staging_for(second_dsn)
    receive(staging, [job, y])
    first = step_counts(metered[1])
    receive(staging, [x])  # derived again: the K row now comes from X's span
    with psycopg.connect(second_dsn) as conn:
        rows = conn.execute("SELECT step_key FROM job_event WHERE type = 'STEP'").fetchall()
    assert rows == [("K",)]
    assert sum(first.values()) == 1
    assert step_counts(metered[1]) == first  # counted once, as it was first
