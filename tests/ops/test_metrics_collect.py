"""collect's step metrics agree with its rows where a request's answer is lost or a later span
changes which span a row came from."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_jobsteps.ingest.decode import decode_protobuf
from otel_jobsteps.ingest.settings import CollectSettings
from otel_jobsteps.ingest.staging import Staging, StagingUnavailable
from otel_jobsteps.metrics import StepMetrics
from tests.faults.proxy import FaultProxy
from tests.helpers import wait_until
from tests.ingest.requests import request_of
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
