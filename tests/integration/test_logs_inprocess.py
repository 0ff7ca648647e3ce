"""Door one's log records: Python ``logging`` through the SDK's LoggingHandler and progress log
events become LOG rows and step detail, the same with the writer thread and the writer process."""

from __future__ import annotations

import logging
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer

from otel_jobsteps import JobStepsProcessor, job_attempt, step
from tests.helpers import rows

LOG_ROWS = (
    "SELECT step_key, step_status, ended_at, message, detail, trace_id IS NOT NULL,"
    " span_id IS NOT NULL FROM job_event WHERE job_id = %s AND type = 'LOG' ORDER BY created_at, id"
)
Logging = tuple[Tracer, logging.Logger, LoggerProvider, JobStepsProcessor]


@pytest.fixture
def logging_to(dsn: str) -> Iterator[Callable[..., Logging]]:
    """A TracerProvider and a LoggerProvider sharing one JobStepsProcessor, and a `logging`
    logger whose records reach it through the SDK's LoggingHandler; all shut down after."""
    built: list[tuple[TracerProvider, LoggerProvider, logging.Logger, logging.Handler]] = []

    def build(**options: Any) -> Logging:
        processor = JobStepsProcessor(dsn, **options)
        tracer_provider, logger_provider = TracerProvider(), LoggerProvider()
        tracer_provider.add_span_processor(processor)
        logger_provider.add_log_record_processor(processor)
        with warnings.catch_warnings():  # 1.39+ points at opentelemetry-instrumentation-logging
            warnings.simplefilter("ignore", DeprecationWarning)
            handler = LoggingHandler(logging.DEBUG, logger_provider=logger_provider)
        log = logging.getLogger(f"tests.logs.{uuid.uuid4().hex}")
        log.setLevel(logging.DEBUG)
        log.propagate = False
        log.addHandler(handler)
        built.append((tracer_provider, logger_provider, log, handler))
        return tracer_provider.get_tracer("tests"), log, logger_provider, processor

    yield build
    for tracer_provider, logger_provider, log, handler in built:
        log.removeHandler(handler)
        logger_provider.shutdown()
        tracer_provider.shutdown()


def _render_job(tracer: Tracer, log: logging.Logger, logger_provider: LoggerProvider,
                job_id: str) -> None:  # fmt: skip
    """One attempt logging between and inside its steps, with a progress log event."""
    events = logger_provider.get_logger("tests.events")
    with job_attempt("render", job_id, "thumbnail", tracer=tracer):
        log.info("picked up %s", job_id)
        with step("RENDER", tracer=tracer):
            log.info("rendering %d frames", 24)
            log.debug("frame 1 of 24")  # below INFO: dropped at the default
            events.emit(event_name="progress", attributes={"pct": 50, "frame": 12})
            with tracer.start_as_current_span("encode"):  # a plain span inside the step
                log.warning("slow encoder")
        with step("SAVE", tracer=tracer):
            try:
                raise OSError("disk full")
            except OSError:
                log.exception("save failed")


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_logging_lines_land_under_their_steps_and_progress_events_become_detail(
    logging_to: Callable[..., Logging], conn: psycopg.Connection[Any], writer: str
) -> None:
    tracer, log, logger_provider, processor = logging_to(writer=writer)
    _render_job(tracer, log, logger_provider, writer)
    assert processor.force_flush(10_000)

    found = rows(conn, LOG_ROWS, writer)
    assert [(r[0], r[3], r[4]["severity"]) for r in found] == [
        (None, "picked up " + writer, "INFO"),
        ("RENDER", "rendering 24 frames", "INFO"),
        ("RENDER", "slow encoder", "WARN"),
        ("SAVE", "save failed", "ERROR"),
    ]
    assert all(r[1] is None and r[2] is None and r[5] and r[6] for r in found)
    failure = found[3][4]["attributes"]
    assert failure["exception.type"] == "OSError"
    assert failure["exception.message"] == "disk full"
    assert "Traceback" in failure["exception.stacktrace"]
    steps = rows(
        conn,
        "SELECT step_key, step_status, detail FROM job_event WHERE job_id = %s AND type = 'STEP'"
        " ORDER BY id",
        writer,
    )
    assert steps == [("RENDER", "COMPLETED", {"pct": 50, "frame": 12}), ("SAVE", "COMPLETED", None)]


def test_the_cap_and_the_minimum_severity_are_settings(
    logging_to: Callable[..., Logging], conn: psycopg.Connection[Any]
) -> None:
    tracer, log, _, processor = logging_to(logs_min_severity="DEBUG", logs_max_per_step=5)
    with job_attempt("render", "cap", "thumbnail", tracer=tracer), step("RENDER", tracer=tracer):
        for n in range(12):
            log.debug("frame %d", n)
    assert processor.force_flush(10_000)
    found = rows(conn, LOG_ROWS, "cap")
    assert [r[3] for r in found] == [
        *(f"frame {n}" for n in range(5)),
        "7 log lines dropped (over the cap of 5 per step)",
    ]
    assert found[-1][4] == {"severity": "WARN", "dropped": 7, "attributes": {}}


def test_records_outside_a_job_scope_cost_no_database_work(
    logging_to: Callable[..., Logging], conn: psycopg.Connection[Any]
) -> None:
    tracer, log, _, processor = logging_to()
    with tracer.start_as_current_span("not a job"):
        for n in range(100):
            log.warning("outside %d", n)
    log.error("no span at all")
    assert processor.force_flush(10_000)
    data = processor.stats()
    assert data.get("commands", 0) == 0
    assert data.get("operations_written", 0) == 0
    assert rows(conn, "SELECT count(*) FROM job_event WHERE type = 'LOG'") == [(0,)]
