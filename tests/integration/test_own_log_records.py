"""otel_jobsteps' own log records (logger ``otel_jobsteps`` and its children, the record's
instrumentation scope) are no job's log lines, though logged in a job's context; collect's
side: tests/integration/test_logs_zero_code.py."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JobStepsProcessor, job_attempt, step
from tests.helpers import rows


def test_the_processor_keeps_our_records_out_of_a_jobs_lines(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    processor = JobStepsProcessor(dsn)
    tracer_provider, logger_provider = TracerProvider(), LoggerProvider()
    tracer_provider.add_span_processor(processor)
    logger_provider.add_log_record_processor(processor)
    tracer = tracer_provider.get_tracer("tests")
    job_id = uuid.uuid4().hex[:8]
    with job_attempt("render", job_id, "thumbnail", tracer=tracer):
        with step("RENDER", tracer=tracer):
            for name in ("otel_jobsteps", "otel_jobsteps.writer", "otel_jobsteps_app", "app"):
                logger_provider.get_logger(name).emit(
                    body=f"from {name}", severity_number=SeverityNumber.WARN
                )
    assert processor.force_flush(10_000)
    logger_provider.shutdown()
    tracer_provider.shutdown()

    found = rows(
        conn, "SELECT message FROM job_event WHERE job_id = %s AND type = 'LOG' ORDER BY id", job_id
    )
    assert found == [("from otel_jobsteps_app",), ("from app",)]
