"""collect with --workers 2: a scrape reaches one worker, and answers every worker's numbers."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.helpers import wait_until
from tests.ingest.collector import CollectorFactory
from tests.ingest.requests import PROTOBUF, proto_spans, request_of
from tests.ops.test_prometheus import check_metrics, samples, value

JOBS = 24  # each in its own request and connection: the kernel hands them to both workers
STAGED = "otel_jobsteps_collect_spans_total"


def job_request(job_id: str) -> bytes:
    """One job of two steps (three spans) as an OTLP/protobuf body."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    job: dict[str, str | int] = {
        "job.domain": "ops", "job.id": job_id, "job.type": "render", "job.attempt": 1
    }  # fmt: skip
    with tracer.start_as_current_span("job", attributes=job):
        for key in ("RENDER", "SAVE"):
            tracer.start_span(key.lower(), attributes={"job.step.key": key}).end()
    provider.shutdown()
    return request_of(proto_spans(exporter.get_finished_spans())).SerializeToString()


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    reply = httpx.get(url + "/metrics", timeout=10)
    assert reply.status_code == 200
    check_metrics(reply.text)
    return samples(reply.text)


def published_staged(temporary: Path) -> float:
    """Spans staged, summed over what every worker last published to the run's directory."""
    total = 0.0
    for path in temporary.glob("otel_jobsteps-collect-metrics-*/worker-*.json"):
        try:
            snapshot = json.loads(path.read_text("utf-8"))
        except ValueError:  # written atomically, but be plain about a torn read
            return -1.0
        for family in snapshot["families"]:
            for name, labels, number in family["samples"]:
                if name == STAGED and labels.get("outcome") == "staged":
                    total += number
    return total


def test_every_scrape_counts_every_workers_requests(
    start_collect: CollectorFactory, second_dsn: str, tmp_path: Path
) -> None:
    temporary = tmp_path / "tmp"  # the run's publishing directory is made here
    temporary.mkdir()
    collector = start_collect(second_dsn, "--workers", "2", env={"TMPDIR": str(temporary)})
    for number in range(JOBS):
        reply = httpx.post(collector.traces_url, content=job_request(f"w-{number}"),
                           headers={**PROTOBUF, "connection": "close"})  # fmt: skip
        assert reply.status_code == 200

    # A scrape adds the answering worker's own numbers to what the others last published (up
    # to a second old): once every worker has published all its requests, every scrape is exact.
    wait_until(
        lambda: published_staged(temporary) == 3 * JOBS,
        what="both workers to publish every span they staged",
        timeout_s=20,
    )
    assert value(scrape(collector.url), "otel_jobsteps_collect_workers") == 2
    for _ in range(8):  # whichever worker answers, the numbers are the run's
        found = scrape(collector.url)
        assert value(found, STAGED, outcome="staged") == 3 * JOBS
        ok = value(found, "otel_jobsteps_collect_requests_total", outcome="ok",
                   http_response_status_code="200")  # fmt: skip
        assert ok >= JOBS  # and collect's start-up probes
        steps = sum(
            count
            for (name, labels), count in found.items()
            if name == "otel_jobsteps_step_duration_seconds_count"
            and ("job_domain", "ops") in labels
        )
        assert steps == 2 * JOBS
    assert collector.stop() == 0
