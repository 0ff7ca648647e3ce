"""The log record hook on the job's thread: what it queues, what it sheds."""

from __future__ import annotations

from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JobStepsProcessor, job_attempt, step
from otel_jobsteps._core.vocabulary import LOG, STEP
from otel_jobsteps.testing import InMemoryStore
from tests.unit.writer_support import HeldSide


def test_log_records_are_shed_before_spans_when_the_queue_is_three_quarters_full() -> None:
    store = InMemoryStore()
    side = HeldSide(store, holding=False)
    processor = JobStepsProcessor(writer_side=side, max_queue_size=8)
    tracers, logs = TracerProvider(), LoggerProvider()
    tracers.add_span_processor(processor)
    logs.add_log_record_processor(processor)
    logger = logs.get_logger("tests")
    try:
        with job_attempt("render", "42", "t", tracer=tracers.get_tracer("t")):
            with step("RENDER", tracer=tracers.get_tracer("t")):
                logger.emit(body="kept", severity_number=SeverityNumber.INFO)
                side.queued = 6  # as if six items were waiting (the limit: 6)
                logger.emit(body="shed", severity_number=SeverityNumber.ERROR)
                side.queued = None  # the writer's own count again
                logger.emit(body="kept too", severity_number=SeverityNumber.WARN)
        assert processor.force_flush(5_000)
        assert processor.stats()["dropped_LogEmitted"] == 1
        found = [(row.type, row.message) for row in store.events()]
        assert found == [(STEP, None), (LOG, "kept"), (LOG, "kept too")]
    finally:
        logs.shutdown()
        tracers.shutdown()
