"""Job stories told through a real tracer: the same spans go to the processor and to collect."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Tracer

from otel_jobsteps import JobStepsProcessor, job_attempt, progress, record_event, step
from otel_jobsteps._cli.demo import record_seed_story
from otel_jobsteps.attributes import JOB_OUTCOME, JOB_STEP_DETAIL, OUTCOME_TARGET_DELETED
from tests.ingest.requests import proto_logs, proto_spans


def seed_story(tracer: Tracer, suffix: str = "") -> None:
    """The seed story (`record_seed_story`: the demo's) as job demo / 42``suffix``."""
    record_seed_story(tracer, "42" + suffix)


def other_paths(tracer: Tracer, suffix: str = "") -> None:
    """Explicit detail over progress, an ordinary event inside a job, target deleted, a step
    entered twice, a late finish past the time limit."""
    job_id = "7" + suffix
    with job_attempt("mail", job_id, "digest", tracer=tracer) as span:
        with step("COLLECT", tracer=tracer) as collect:
            progress(n=1)
            collect.set_attribute(JOB_STEP_DETAIL, '{"n": 99, "why": "explicit"}')
        record_event("LOG", "halfway", tracer=tracer, note="<script>x</script>\u0000")
        with step("SEND", tracer=tracer):
            with step("SEND", tracer=tracer):
                progress(to="a@b")
        span.set_attribute(JOB_OUTCOME, OUTCOME_TARGET_DELETED)
    with job_attempt("mail", job_id + "-late", "digest", time_limit=0.001, tracer=tracer):
        with step("SLOW", tracer=tracer):
            time.sleep(0.01)


def tell_all(tracer: Tracer, suffix: str = "") -> None:
    """Every story; ``suffix`` ends every job id (to tell runs apart in one database)."""
    seed_story(tracer, suffix)
    other_paths(tracer, suffix)


class _SystemIds(IdGenerator):
    """Ids from the OS: hypothesis seeds the ``random`` module the SDK's ids come from, which
    would give every example the same ids (a duplicate of the last one)."""

    def generate_span_id(self) -> int:
        return secrets.randbits(64) or 1

    def generate_trace_id(self) -> int:
        return secrets.randbits(128) or 1


class Recording:
    """One tracer and one logger provider: the processor writes the reference rows, the
    exporters keep the spans and the log records (``logger`` emits them)."""

    def __init__(self, dsn: str, **options: Any) -> None:
        self.processor = JobStepsProcessor(dsn, **options)
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(id_generator=_SystemIds())
        self.provider.add_span_processor(self.processor)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.log_exporter = InMemoryLogRecordExporter()
        self.logger_provider = LoggerProvider()
        self.logger_provider.add_log_record_processor(self.processor)
        self.logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.log_exporter))
        self.logger = self.logger_provider.get_logger("tests")

    def spans(self, story: Callable[[Tracer, str], None], suffix: str) -> list[Span]:
        """Tell ``story`` with job ids ending in ``suffix``; its spans as OTLP protobuf (its
        log records: `logs`)."""
        self.exporter.clear()
        self.log_exporter.clear()
        story(self.provider.get_tracer("tests"), suffix)
        assert self.processor.force_flush(10_000)
        return proto_spans(self.exporter.get_finished_spans())

    def logs(self) -> list[LogRecord]:
        """The log records the last story emitted, as OTLP protobuf."""
        return proto_logs(self.log_exporter.get_finished_logs())

    def close(self) -> None:
        self.logger_provider.shutdown()
        self.provider.shutdown()
