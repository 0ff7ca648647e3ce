"""GET /metrics of real `serve` and `collect` processes, scraped over HTTP, checked by promtool."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client.parser import text_string_to_metric_families

from otel_jobsteps import job_attempt
from otel_jobsteps._telemetry.prometheus import OpenTelemetryCollector, exposition, prometheus_name
from tests.helpers import TracingFactory, free_port, open_step, wait_until
from tests.ingest.collector import CollectorFactory
from tests.ingest.requests import post, request_of
from tests.ingest.stories import Recording, seed_story
from tests.ops.promtool import run_promtool

TOKEN = "metrics-token-long-enough"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(
    found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return found[(name, frozenset(labels.items()))]


def check_metrics(text: str) -> None:
    checked = run_promtool("check", "metrics", stdin=text)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.fixture
def serve_url(dsn: str) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_jobsteps.cli", "serve", "--dsn", dsn,
         "--listen", f"127.0.0.1:{port}", "--token", TOKEN, "--silent-after", "10m"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return httpx.get(url + "/metrics", timeout=2).status_code > 0
        except httpx.TransportError:
            return False

    try:
        wait_until(answers, what="serve to answer")
        yield url
    finally:
        process.terminate()
        process.wait(10)


def test_serve_counts_open_and_silent_steps(serve_url: str, conn: psycopg.Connection[Any]) -> None:
    open_step(conn, "1", age="1 hour", heartbeat_age="30 minutes")  # silent
    open_step(conn, "2", age="1 hour", heartbeat_age="1 minute")  # alive
    open_step(conn, "3", age="1 minute", key="RENDER")

    refused = httpx.get(serve_url + "/metrics")
    reply = httpx.get(serve_url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"})

    assert refused.status_code == 401  # the pages' auth rules
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain")
    found = samples(reply.text)
    labels = {"job_domain": "render", "job_type": "thumbnail"}
    assert value(found, "otel_jobsteps_open_steps", **labels, job_step_key="SAVE") == 2
    assert value(found, "otel_jobsteps_silent_steps", **labels, job_step_key="SAVE") == 1
    assert value(found, "otel_jobsteps_open_steps", **labels, job_step_key="RENDER") == 1
    assert value(found, "otel_jobsteps_silent_steps", **labels, job_step_key="RENDER") == 0
    check_metrics(reply.text)


def test_collect_exports_the_step_metrics_it_recorded(
    start_collect: CollectorFactory, dsn: str, second_dsn: str
) -> None:
    recording = Recording(dsn)
    try:
        spans = recording.spans(seed_story, "")
    finally:
        recording.close()
    collector = start_collect(second_dsn)
    half = len(spans) // 2
    for part in (spans[:half], spans[half:], spans[:2]):  # the last: copies already staged
        assert post(collector.traces_url, request_of(part).SerializeToString()).status_code == 200
    assert post(collector.traces_url, b"\x01", {"content-type": "text/plain"}).status_code == 415

    reply = httpx.get(collector.url + "/metrics")

    assert reply.status_code == 200
    found = samples(reply.text)
    step = {"job_domain": "demo", "job_type": "thumbnail"}
    duration = "otel_jobsteps_step_duration_seconds_count"
    assert value(found, duration, **step, job_step_key="RENDER", job_step_status="COMPLETED") == 2
    assert value(found, duration, **step, job_step_key="SAVE", job_step_status="FAILED") == 1
    assert value(found, duration, **step, job_step_key="SAVE", job_step_status="COMPLETED") == 1
    attempts = "otel_jobsteps_attempts_total"
    assert value(found, attempts, **step, job_status="FAILED", job_reason="error") == 1
    assert value(found, attempts, **step, job_status="COMPLETED", job_reason="") == 1
    requests = "otel_jobsteps_collect_requests_total"
    assert value(found, requests, outcome="ok", http_response_status_code="200") == 4  # + probe
    assert (
        value(found, requests, outcome="unsupported_media_type", http_response_status_code="415")
        == 1
    )
    assert value(found, "otel_jobsteps_collect_spans_total", outcome="staged") == len(spans)
    assert value(found, "otel_jobsteps_collect_spans_total", outcome="duplicate") == 2
    assert ("otel_jobsteps_collect_settle_lag_seconds", frozenset()) in found
    check_metrics(reply.text)


def test_the_processors_counters_get_the_names_the_alerts_use(tracing: TracingFactory) -> None:
    reader = InMemoryMetricReader()
    tracer, processor = tracing(meter_provider=MeterProvider(metric_readers=[reader]))
    processor.shutdown()
    with job_attempt("demo", "1", "thumbnail", tracer=tracer):  # after shutdown: dropped
        pass

    text = exposition([OpenTelemetryCollector(reader)]).decode()

    found = samples(text)
    assert value(found, "otel_jobsteps_dropped_total", kind="SpanStarted") == 1
    assert "otel_jobsteps_queue_length" in {name for name, _ in found}
    check_metrics(text)


@pytest.mark.parametrize(
    ("name", "unit", "expected"),
    [
        pytest.param("otel_jobsteps.step.duration", "s", "otel_jobsteps_step_duration_seconds"),
        pytest.param("otel_jobsteps.attempts", "{attempt}", "otel_jobsteps_attempts", id="braces"),
        pytest.param("otel_jobsteps.queue.length", "", "otel_jobsteps_queue_length", id="none"),
        pytest.param("request.size_bytes", "By", "request_size_bytes", id="suffix-there"),
    ],
)
def test_opentelemetry_names_map_as_prometheus_expects(name: str, unit: str, expected: str) -> None:
    assert prometheus_name(name, unit) == expected
