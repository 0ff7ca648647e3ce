"""The zero-code setup adds the processor to an SDK LoggerProvider once, beside what is there."""

from __future__ import annotations

from opentelemetry._logs import NoOpLoggerProvider
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, ConsoleLogRecordExporter

from otel_jobsteps import JobStepsProcessor
from otel_jobsteps.auto import log_into
from otel_jobsteps.testing import InMemoryStore


def test_log_into_adds_once_and_keeps_the_exporters() -> None:
    processor = JobStepsProcessor(store=InMemoryStore())
    provider = LoggerProvider()
    exporting = BatchLogRecordProcessor(ConsoleLogRecordExporter())
    provider.add_log_record_processor(exporting)
    try:
        assert log_into(processor, provider)
        assert log_into(JobStepsProcessor(store=InMemoryStore()), provider)  # one is enough
        processors = provider._multi_log_record_processor._log_record_processors
        assert processors == (exporting, processor)
        assert not log_into(processor, NoOpLoggerProvider())
    finally:
        provider.shutdown()
