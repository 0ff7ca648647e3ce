"""The Python OTLP log exporter beside the span exporter, over HTTP and gRPC, against a running
``collect``: Python ``logging`` lines and a progress log event give the processor's rows, with
the records sent before or after their spans, split over requests and partly twice."""

from __future__ import annotations

import contextlib
import logging
import uuid
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogs
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogs
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler, ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    InMemoryLogRecordExporter,
    LogRecordExportResult,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from otel_jobsteps import JobStepsProcessor, job_attempt, step
from tests.ingest.collector import Collector, CollectorFactory, table_rows

Exporters = tuple[Callable[[Sequence[ReadableSpan]], Any], Callable[[Sequence[Any]], Any]]


def _story(tracer: Tracer, log: logging.Logger, provider: LoggerProvider, job_id: str) -> None:
    """A job logging between and inside its steps, a DEBUG line, a progress log event, and a
    failing step with its exception logged."""
    events = provider.get_logger("tests.events")
    with job_attempt("render", job_id, "thumbnail", tracer=tracer):
        log.info("queued %s", job_id)
        with step("FETCH", tracer=tracer):
            log.info("fetching %d files", 3)
            log.debug("cache miss")  # below INFO: no row through either door
            events.emit(event_name="progress", attributes={"files": 2, "of": 3})
            log.warning("slow mirror", extra={"mirror": "eu-1"})
        with contextlib.suppress(ValueError), step("RENDER", tracer=tracer):
            try:
                raise ValueError("bad frame")
            except ValueError:
                log.exception("render failed")
                raise
        log.error("giving up after RENDER")


def _exporters(collector: Collector, transport: str) -> Exporters:
    """The real OTLP span and log exporters of ``transport`` aimed at ``collector``."""
    if transport.startswith("grpc"):
        compression = grpc.Compression.Gzip if "gzip" in transport else None
        target = collector.grpc_target
        spans = GrpcSpans(endpoint=target, insecure=True, compression=compression)
        logs = GrpcLogs(endpoint=target, insecure=True, compression=compression)
    else:
        http = Compression.Gzip if "gzip" in transport else Compression.NoCompression
        spans = HttpSpans(endpoint=collector.traces_url, compression=http)
        logs = HttpLogs(endpoint=f"{collector.url}/v1/logs", compression=http)
    return spans.export, logs.export


def _recorded(dsn: str, **options: Any) -> tuple[list[ReadableSpan], list[ReadableLogRecord], str]:
    """Tell the story with the processor (``options``) writing ``dsn``; what the exporters
    would send."""
    spans, records = InMemorySpanExporter(), InMemoryLogRecordExporter()
    processor = JobStepsProcessor(dsn, **options)
    tracer_provider, logger_provider = TracerProvider(), LoggerProvider()
    tracer_provider.add_span_processor(processor)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    logger_provider.add_log_record_processor(processor)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(records))
    with warnings.catch_warnings():  # 1.39+ points at opentelemetry-instrumentation-logging
        warnings.simplefilter("ignore", DeprecationWarning)
        handler = LoggingHandler(logging.DEBUG, logger_provider=logger_provider)
    log = logging.getLogger(f"tests.collect.logs.{uuid.uuid4().hex}")
    log.setLevel(logging.DEBUG)
    log.propagate = False
    log.addHandler(handler)
    job_id = f"l-{uuid.uuid4().hex[:10]}"
    try:
        _story(tracer_provider.get_tracer("tests"), log, logger_provider, job_id)
        assert processor.force_flush(10_000)
    finally:
        log.removeHandler(handler)
        logger_provider.shutdown()
        tracer_provider.shutdown()
    return list(spans.get_finished_spans()), list(records.get_finished_logs()), job_id


@pytest.mark.parametrize(
    ("transport", "logs_first"),
    [("http", True), ("http-gzip", False), ("grpc", False), ("grpc-gzip", True)],
)
def test_exported_logs_give_the_processors_rows(
    start_collect: CollectorFactory,
    dsn: str,
    second_dsn: str,
    transport: str,
    logs_first: bool,
) -> None:
    spans, records, job_id = _recorded(dsn)
    export_spans, export_logs = _exporters(start_collect(second_dsn), transport)
    # Split in small requests, the first request of records sent twice (an exporter's retry).
    record_batches = [records[i : i + 2] for i in range(0, len(records), 2)]
    record_batches.insert(1, record_batches[0])
    span_batches = [spans[i : i + 2] for i in range(0, len(spans), 2)]
    sends: list[tuple[Callable[[Any], Any], Sequence[Any], Any]] = [
        (export_logs, batch, LogRecordExportResult.SUCCESS) for batch in record_batches
    ]
    span_sends = [(export_spans, batch, SpanExportResult.SUCCESS) for batch in span_batches]
    sends = sends + span_sends if logs_first else span_sends + sends
    for export, batch, success in sends:
        assert export(batch) == success

    live = table_rows(dsn, job_id)
    assert table_rows(second_dsn, job_id) == live
    lines = [(row[5], row[7]["severity"], row[8]) for row in live[0] if row[4] == "LOG"]
    assert ("FETCH", "WARN", "slow mirror") in lines
    assert (None, "INFO", f"queued {job_id}") in lines
    assert not any(message == "cache miss" for _, _, message in lines)
    fetch = [row for row in live[0] if row[4] == "STEP" and row[5] == "FETCH"]
    assert fetch[0][7] == {"files": 2, "of": 3}  # the progress log event's detail
