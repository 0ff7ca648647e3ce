"""Issue 37's step rules give the same rows through both doors: the live processor with a real
LoggerProvider, and ``collect`` fed by the real OTLP span and log exporters. A step closed by a
sibling's start that then fails is FAILED; a skipped step is SKIPPED; a step failing with no
exception of its own takes its text from an exception log record (``exception`` and
``<domain>.exception``, as OTEL_SEMCONV_EXCEPTION_SIGNAL_OPT_IN=logs emits them) when collect
gets the records before or with their spans."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, Tracer

from otel_jobsteps import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID, JOB_STEP_KEY, JobStepsProcessor
from otel_jobsteps._core.dialects.cicd import STEP_SKIPPED
from otel_jobsteps._ingest.decode import decode_protobuf
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging
from tests.ingest.collector import CollectorFactory, table_rows
from tests.ingest.requests import request_of
from tests.ingest.stories import Recording


def _exception(kind: str, message: str) -> dict[str, Any]:
    return {"exception.type": kind, "exception.message": message}


@pytest.mark.parametrize("logs_first", [True, False])
def test_the_step_rules_of_issue_37_through_both_doors(
    start_collect: CollectorFactory, dsn: str, second_dsn: str, logs_first: bool
) -> None:
    spans, records = InMemorySpanExporter(), InMemoryLogRecordExporter()
    processor = JobStepsProcessor(dsn)
    tracer_provider, logger_provider = TracerProvider(), LoggerProvider()
    for span_processor in (processor, SimpleSpanProcessor(spans)):
        tracer_provider.add_span_processor(span_processor)
    for log_processor in (processor, SimpleLogRecordProcessor(records)):
        logger_provider.add_log_record_processor(log_processor)
    tracer, logger = tracer_provider.get_tracer("tests"), logger_provider.get_logger("tests")
    job_id = f"s-{uuid.uuid4().hex[:10]}"
    try:
        with tracer.start_as_current_span(
            "pipeline", attributes={JOB_DOMAIN: "ci", JOB_ID: job_id, JOB_ATTEMPT: 1}
        ) as job:
            here = trace.set_span_in_context(job)
            fetch = tracer.start_span("fetch", here, attributes={JOB_STEP_KEY: "FETCH"})
            assert processor.force_flush(10_000)
            build = tracer.start_span("build", here, attributes={JOB_STEP_KEY: "BUILD"})
            assert processor.force_flush(10_000)  # FETCH closed by BUILD's start, committed
            with trace.use_span(build):
                logger.emit(event_name="exception", attributes=_exception("OSError", "disk"))
            build.set_status(Status(StatusCode.ERROR))
            build.end()
            fetch.record_exception(ConnectionError("mirror down"))
            fetch.set_status(Status(StatusCode.ERROR))
            fetch.end()
            skipped = {JOB_STEP_KEY: "LINT", STEP_SKIPPED: True}
            tracer.start_span("lint", here, attributes=skipped).end()
            with tracer.start_as_current_span("push", attributes={JOB_STEP_KEY: "PUSH"}) as push:
                logger.emit(
                    event_name="http.client.exception",
                    attributes=_exception("TimeoutError", "registry"),
                )
                push.set_status(Status(StatusCode.ERROR))
        assert processor.force_flush(10_000)
    finally:
        logger_provider.shutdown()
        tracer_provider.shutdown()

    collector = start_collect(second_dsn)
    sends = [
        lambda: OTLPLogExporter(endpoint=f"{collector.url}/v1/logs").export(
            records.get_finished_logs()
        ),
        lambda: OTLPSpanExporter(endpoint=collector.traces_url).export(spans.get_finished_spans()),
    ]
    for send in sends if logs_first else reversed(sends):
        assert send().name == "SUCCESS"

    live = table_rows(dsn, job_id)
    steps = [(row[5], row[6], row[8]) for row in live[0] if row[4] == "STEP"]
    assert steps == [
        ("FETCH", "FAILED", "ConnectionError: mirror down"),
        ("BUILD", "FAILED", "OSError: disk"),
        ("LINT", "SKIPPED", None),
        ("PUSH", "FAILED", "TimeoutError: registry"),
    ]
    collected = table_rows(second_dsn, job_id)
    if logs_first:
        assert collected == live
    else:
        # Records that arrive after their attempt settled are written as lines only (as a late
        # progress record changes nothing): collect has no failure text for those two steps.
        unread = {"BUILD", "PUSH"}
        expected = [
            (*row[:8], None, *row[9:]) if row[4] == "STEP" and row[5] in unread else row
            for row in live[0]
        ]
        assert collected == (expected, live[1])


def _pipeline(tracer: Tracer, suffix: str) -> None:
    """A CI/CD pipeline run (the cicd dialect): a task, a skipped task, then two tasks in
    parallel, the first to start failing after the second started and ended."""
    run_id = f"run{suffix}"
    pipeline = {"cicd.pipeline.name": "deploy", "cicd.pipeline.run.id": run_id}

    def task(name: str, result: str) -> dict[str, Any]:
        return {
            "cicd.pipeline.task.name": name,
            "cicd.pipeline.task.run.id": f"{name}{suffix}",
            "cicd.pipeline.task.run.result": result,
        }

    with tracer.start_as_current_span("deploy", attributes=pipeline) as run:
        with tracer.start_as_current_span("checkout", attributes=task("checkout", "success")):
            pass
        tracer.start_span("lint", attributes=task("lint", "skip")).end()
        test = tracer.start_span("test", attributes=task("test", "failure"))
        tracer.start_span("package", attributes=task("package", "success")).end()
        test.set_status(Status(StatusCode.ERROR, "3 tests failed"))
        test.end()
        run.set_attribute("cicd.pipeline.result", "failure")


@pytest.mark.parametrize("requests", ["one request", "each span alone"])
def test_parallel_and_skipped_ci_tasks_through_both_doors(
    dsn: str, second_dsn: str, requests: str
) -> None:
    recording = Recording(dsn, dialects="cicd")
    settings = CollectSettings(second_dsn, settle_after_s=0.0, connections=1, dialects=("cicd",))
    staging = Staging(settings)
    try:
        spans = recording.spans(_pipeline, f"-{uuid.uuid4().hex[:8]}")
        for part in [spans] if requests == "one request" else [[span] for span in spans]:
            decoded = decode_protobuf(request_of(part).SerializeToString())
            staging.receive(decoded.spans, decoded.wire)
        staging.settle()
    finally:
        staging.close()
        recording.close()
    live = table_rows(dsn)
    assert [(row[5], row[6], row[8]) for row in live[0] if row[4] == "STEP"] == [
        ("checkout", "COMPLETED", None),
        ("lint", "SKIPPED", None),
        ("test", "FAILED", "3 tests failed"),
        ("package", "COMPLETED", None),
    ]
    assert [(row[4], row[6]["step"]) for row in live[1]] == [("FAILED", "test")]
    assert table_rows(second_dsn) == live
