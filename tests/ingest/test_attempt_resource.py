"""The resource each attempt ran under (DESIGN "Per attempt resource"): ``service.name``,
``service.version``, ``host.name`` and ``service.instance.id`` of the job span's resource, kept
with the attempt's final row by both doors, and shown by `attempt_diff`."""

from __future__ import annotations

import uuid
from contextlib import nullcontext
from typing import Any

import psycopg
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

from otel_jobsteps import JobStepsProcessor, job_attempt, step
from otel_jobsteps._core.dialects import NO_DIALECTS
from otel_jobsteps._core.facts import RESOURCE_ATTRIBUTES
from otel_jobsteps._ingest.decode import carry_resources, decode_protobuf, decode_span
from otel_jobsteps.cli import main
from otel_jobsteps.query import attempt_diff
from otel_jobsteps.web import create_app
from tests.helpers import wait_until
from tests.ingest.collector import CollectorFactory

RESOURCES: list[dict[str, Any]] = [
    # attempt 1 on one host and release, attempt 2 on another
    {"service.name": "render-worker", "service.version": "1.4.2", "host.name": "web-7",
     "service.instance.id": "i-1", "deployment.environment": "prod"},
    {"service.name": "render-worker", "service.version": "1.5.0", "host.name": "web-9\x00",
     "service.instance.id": "i-2", "process.pid": 4242},
]  # fmt: skip
RESOURCE_ROWS = (
    "SELECT attempt, status, service_name, service_version, host_name, service_instance_id"
    " FROM job_log WHERE job_id = %s ORDER BY attempt"
)


def _run(dsn: str, job_id: str, traces_url: str) -> list[Any]:
    """Two attempts of one job, each from a provider of its own resource: written by the
    processor, exported span by span to collect; returns the spans as exported."""
    spans: list[Any] = []
    for attempt, resource in enumerate(RESOURCES, start=1):
        processor = JobStepsProcessor(dsn)
        exporter = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create(resource))
        provider.add_span_processor(processor)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=traces_url)))
        tracer = provider.get_tracer("tests")
        with (
            pytest.raises(OSError, match="disk full") if attempt == 1 else nullcontext(),
            job_attempt("render", job_id, "thumbnail", attempts_made=attempt - 1, tracer=tracer),
        ):
            with step("SAVE", tracer=tracer):
                if attempt == 1:
                    raise OSError("disk full")
        assert processor.force_flush(10_000)
        provider.shutdown()
        spans.extend(exporter.get_finished_spans())
    return spans


EXPECTED = [
    (1, "FAILED", "render-worker", "1.4.2", "web-7", "i-1"),
    (2, "COMPLETED", "render-worker", "1.5.0", "web-9\ufffd", "i-2"),  # NUL replaced
]


def _resource_rows(dsn: str, job_id: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(RESOURCE_ROWS, (job_id,)).fetchall()


def test_both_doors_keep_each_attempts_resource_with_its_final_row(
    dsn: str,
    second_dsn: str,
    start_collect: CollectorFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    collector = start_collect(second_dsn)
    job_id = f"res-{uuid.uuid4().hex[:8]}"
    _run(dsn, job_id, collector.traces_url)
    assert _resource_rows(dsn, job_id) == EXPECTED
    wait_until(lambda: len(_resource_rows(second_dsn, job_id)) == 2, what="collect's final rows")
    assert _resource_rows(second_dsn, job_id) == EXPECTED
    # shown by the diff: the CLI and the page
    assert main(["show", "render", job_id, "--dsn", second_dsn, "--diff", "1", "2"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "attempt 2: COMPLETED  resource service.name=render-worker, service.version=1.5.0,"
        " host.name=web-9\ufffd, service.instance.id=i-2"
    )
    with TestClient(create_app(second_dsn)) as client:
        page = client.get(f"/jobs/render/{job_id}/diff?a=1&b=2").text
    assert '<span class="tag-name">service.version</span>=<span class="tag-value">1.4.2' in page
    for target in (dsn, second_dsn):
        diff = attempt_diff(target, "render", job_id, 1, 2)
        assert diff is not None
        assert diff.to_dict()["a"]["resource"] == {
            "service.name": "render-worker",
            "service.version": "1.4.2",
            "host.name": "web-7",
            "service.instance.id": "i-1",
        }
        assert diff.b.resource["service.version"] == "1.5.0"


def test_collect_keeps_the_resource_in_the_job_spans_copy_only(
    dsn: str, second_dsn: str, start_collect: CollectorFactory
) -> None:
    """A later derivation reads the kept copy: a job span's carries its resource's values; a
    step span's stays as received (the resource would only cost room)."""
    collector = start_collect(second_dsn)
    spans = _run(dsn, f"res-{uuid.uuid4().hex[:8]}", collector.traces_url)
    decoded = decode_protobuf(encode_spans(spans).SerializeToString())
    carry_resources(decoded, NO_DIALECTS)
    kept = {
        span.name: decode_span(wire).attributes
        for span, wire in zip(decoded.spans, decoded.wire, strict=True)
    }
    job = next(attributes for name, attributes in kept.items() if name.startswith("job "))
    assert {k: job.get(k) for k in RESOURCE_ATTRIBUTES} == {
        "otel_jobsteps.resource.service.name": "render-worker",
        "otel_jobsteps.resource.service.version": "1.5.0",
        "otel_jobsteps.resource.host.name": "web-9\x00",
        "otel_jobsteps.resource.service.instance.id": "i-2",
    }
    assert RESOURCE_ATTRIBUTES[0] not in kept["save"]


def test_a_final_row_no_job_span_wrote_has_no_resource(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    conn.execute(
        "INSERT INTO job_event (domain, job_id, attempt, type, step_key, step_status, created_at,"
        " ended_at) VALUES ('render', 'swept', 1, 'STEP', 'A', 'FAILED', now(), now())"
    )
    conn.execute(
        "INSERT INTO job_log (domain, job_id, attempt, status, created_at) VALUES ('render',"
        " 'swept', 1, 'FAILED', now())"
    )
    diff = attempt_diff(dsn, "render", "swept", 1, 1)
    assert diff is not None
    assert (diff.a.resource, diff.b.resource) == ({}, {})
