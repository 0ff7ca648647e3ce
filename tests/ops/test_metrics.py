"""Step metrics through OpenTelemetry: recorded for what the writer committed, both doors."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import psycopg
import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_jobsteps import job_attempt, step
from otel_jobsteps._cli.demo import record_seed_story
from otel_jobsteps._ingest.decode import decode_protobuf
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging
from otel_jobsteps._telemetry.metrics import (
    ATTEMPTS,
    DEFAULT_MAX_STEP_KEYS,
    DURATION_BUCKETS_S,
    MAX_STEP_KEYS_ENV,
    OTHER_STEP_KEY,
    STEP_DURATION,
    StepMetrics,
    max_step_keys_from_environment,
)
from otel_jobsteps.errors import ConfigurationError
from tests.faults.proxy import FaultProxy
from tests.faults.support import BridgeFactory, run_jobs
from tests.helpers import TracingFactory, free_port, wait_until
from tests.ingest.collector import CollectorFactory
from tests.ingest.requests import request_of
from tests.ingest.stories import Recording, seed_story

# The seed story, counted: what its rows say (RENDER twice, SAVE failed then completed).
SEED_STEPS = {
    ("demo", "thumbnail", "RENDER", "COMPLETED"): 2,
    ("demo", "thumbnail", "SAVE", "FAILED"): 1,
    ("demo", "thumbnail", "SAVE", "COMPLETED"): 1,
}
SEED_ATTEMPTS = {
    ("demo", "thumbnail", "FAILED", "error"): 1,
    ("demo", "thumbnail", "COMPLETED", None): 1,
}


def points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    return [
        point
        for resource in (data.resource_metrics if data else ())
        for scope in resource.scope_metrics
        if scope.scope.name == "otel_jobsteps"
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


STEP_LABELS = ("job.domain", "job.type", "job.step.key", "job.step.status")
ATTEMPT_LABELS = ("job.domain", "job.type", "job.status", "job.reason")


def step_counts(reader: InMemoryMetricReader) -> dict[tuple[Any, ...], int]:
    return {
        tuple(p.attributes.get(k) for k in STEP_LABELS): p.count
        for p in points(reader, STEP_DURATION)
    }


def attempt_counts(reader: InMemoryMetricReader) -> dict[tuple[Any, ...], int]:
    return {
        tuple(p.attributes.get(k) for k in ATTEMPT_LABELS): p.value
        for p in points(reader, ATTEMPTS)
    }


def metered(tracing: TracingFactory, **options: Any) -> tuple[Any, Any, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    tracer, processor = tracing(meter_provider=MeterProvider(metric_readers=[reader]), **options)
    return tracer, processor, reader


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_the_seed_story_counted_as_its_rows_say(tracing: TracingFactory, writer: str) -> None:
    tracer, processor, reader = metered(tracing, writer=writer)
    record_seed_story(tracer, "42")
    assert processor.force_flush(10_000)
    assert step_counts(reader) == SEED_STEPS
    assert attempt_counts(reader) == SEED_ATTEMPTS
    (render,) = [
        p for p in points(reader, STEP_DURATION) if p.attributes["job.step.key"] == "RENDER"
        and p.attributes["job.step.status"] == "COMPLETED"
    ]  # fmt: skip
    assert tuple(render.explicit_bounds) == DURATION_BUCKETS_S


def test_a_close_that_matched_nothing_is_not_counted(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    tracer, processor, reader = metered(tracing)
    with job_attempt("demo", "9", "thumbnail", tracer=tracer):
        with step("RENDER", tracer=tracer):
            assert processor.force_flush(10_000)  # the step's row is open in the database
            # Someone else (sweep, another worker) closes it first: our close loses the race.
            conn.execute("UPDATE job_event SET ended_at = now(), step_status = 'FAILED'")
    assert processor.force_flush(10_000)
    assert step_counts(reader) == {}
    assert attempt_counts(reader) == {("demo", "thumbnail", "COMPLETED", None): 1}


def test_a_zombie_attempts_final_row_after_its_abandon_is_not_counted(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    """Attempt 2 abandons attempt 1; attempt 1's own end comes later and its job_log row is
    skipped (ON CONFLICT): one count per job_log row, not per final row sent."""
    tracer, processor, reader = metered(tracing)
    zombie = job_attempt("z", "zombie", "t", attempts_made=0, tracer=tracer)
    zombie.__enter__()
    with step("A", tracer=tracer):
        pass
    assert processor.force_flush(10_000)
    with job_attempt("z", "zombie", "t", attempts_made=1, tracer=tracer):
        pass
    assert processor.force_flush(10_000)
    zombie.__exit__(None, None, None)  # the abandoned attempt ends after all
    assert processor.force_flush(10_000)
    logs = conn.execute("SELECT attempt, status, reason FROM job_log ORDER BY attempt").fetchall()
    assert logs == [(1, "FAILED", "abandoned"), (2, "COMPLETED", None)]
    assert attempt_counts(reader) == {
        ("z", "t", "FAILED", "abandoned"): 1, ("z", "t", "COMPLETED", None): 1,
    }  # fmt: skip


def test_step_keys_beyond_the_bound_are_folded_and_counted(tracing: TracingFactory) -> None:
    tracer, processor, reader = metered(tracing, max_step_keys=2)
    with job_attempt("demo", "9", "thumbnail", tracer=tracer):
        for key in ("A", "B", "C", "D", "A"):
            with step(key, tracer=tracer):
                pass
    assert processor.force_flush(10_000)
    assert step_counts(reader) == {
        ("demo", "thumbnail", "A", "COMPLETED"): 2,
        ("demo", "thumbnail", "B", "COMPLETED"): 1,
        ("demo", "thumbnail", OTHER_STEP_KEY, "COMPLETED"): 2,
    }
    assert processor.stats()["metrics_step_keys_folded"] == 2


def test_collect_counts_the_seed_story_once_however_it_arrives(dsn: str, second_dsn: str) -> None:
    recording = Recording(dsn)
    try:
        spans = recording.spans(seed_story, "")
    finally:
        recording.close()
    # One span a request, shuffled, some twice: every request derives its traces again.
    pool = spans + spans[:3]
    random.Random(7).shuffle(pool)
    reader = InMemoryMetricReader()
    metrics = StepMetrics(MeterProvider(metric_readers=[reader]))
    staging = Staging(CollectSettings(second_dsn, connections=1), on_committed=metrics.record)
    try:
        for span in pool:
            decoded = decode_protobuf(request_of([span]).SerializeToString())
            staging.receive(decoded.spans, decoded.wire)
    finally:
        staging.close()
    assert step_counts(reader) == SEED_STEPS
    assert attempt_counts(reader) == SEED_ATTEMPTS


class _MetricsReceiver(BaseHTTPRequestHandler):
    """A stand-in OTLP/HTTP metrics endpoint: keeps the metric names of every export."""

    names: ClassVar[set[str]] = set()

    def do_POST(self) -> None:
        request = ExportMetricsServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers["content-length"])))
        self.names.update(
            metric.name
            for resource in request.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        )
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.end_headers()
        self.wfile.write(ExportMetricsServiceResponse().SerializeToString())

    def log_message(self, format: str, *args: Any) -> None:
        return None


def test_collect_pushes_through_the_exporter_otel_metrics_exporter_names(
    start_collect: CollectorFactory, second_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), _MetricsReceiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{receiver.server_address[1]}/v1/metrics"
        monkeypatch.setenv("OTEL_METRICS_EXPORTER", "otlp")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "100")
        start_collect(second_dsn)
        wait_until(
            lambda: "otel_jobsteps.collect.requests" in _MetricsReceiver.names,
            what="an OTLP metrics export",
        )
    finally:
        receiver.shutdown()
        receiver.server_close()


def test_an_unknown_metrics_exporter_is_a_clear_error(second_dsn: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "otel_jobsteps.cli", "collect", "--dsn", second_dsn,
         "--listen", f"127.0.0.1:{free_port()}"],
        env={**os.environ, "OTEL_METRICS_EXPORTER": "nosuch"},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "OTEL_METRICS_EXPORTER names 'nosuch'" in done.stderr


@pytest.mark.parametrize(
    ("value", "environment", "expected"),
    [
        pytest.param(None, None, DEFAULT_MAX_STEP_KEYS, id="default"),
        pytest.param(None, "7", 7, id="environment"),
        pytest.param(3, "7", 3, id="argument-first"),
        pytest.param(None, "many", ConfigurationError, id="not-a-number"),
        pytest.param(0, None, ConfigurationError, id="zero"),
    ],
)
def test_the_step_key_bound(
    value: int | None, environment: str | None, expected: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    if environment is None:
        monkeypatch.delenv(MAX_STEP_KEYS_ENV, raising=False)
    else:
        monkeypatch.setenv(MAX_STEP_KEYS_ENV, environment)
    if expected is ConfigurationError:
        with pytest.raises(ConfigurationError):
            max_step_keys_from_environment(value)
    else:
        assert max_step_keys_from_environment(value) == expected


def committed_rows(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """(closed STEP rows, job_log rows): what the metrics must have counted."""
    steps = conn.execute("SELECT count(*) FROM job_event WHERE type = 'STEP'").fetchone()
    logs = conn.execute("SELECT count(*) FROM job_log").fetchone()
    return (steps[0] if steps else 0), (logs[0] if logs else 0)


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(b"COMMIT", id="commit-landed-answer-lost"),
        pytest.param(b"INSERT", id="cut-mid-batch-written-again"),
    ],
)
def test_a_batch_whose_write_broke_is_counted_once(
    bridge: BridgeFactory, proxy: FaultProxy, conn: psycopg.Connection[Any], reply: bytes
) -> None:
    reader = InMemoryMetricReader()
    b = bridge(meter_provider=MeterProvider(metric_readers=[reader]))
    run_jobs(b.tracer, "warm", 1)
    assert b.processor.force_flush(10_000)
    proxy.cut_when(server_sends=reply)  # the server did the work, the writer never hears it
    run_jobs(b.tracer, "cut", 6)
    assert b.processor.force_flush(15_000)
    assert proxy.cuts_pending() == 0
    steps, logs = committed_rows(conn)
    assert sum(step_counts(reader).values()) == steps == 7 * 3
    assert sum(attempt_counts(reader).values()) == logs == 7
