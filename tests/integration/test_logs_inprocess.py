"""Door one's log records: Python ``logging`` through the SDK's LoggingHandler and progress log
events become LOG rows and step detail, the same with the writer thread and the writer process."""

from __future__ import annotations

import logging
import re
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
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


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"k": value}
    return value


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_hostile_bodies_and_attributes_are_stored_safely(
    logging_to: Callable[..., Logging], conn: psycopg.Connection[Any], writer: str
) -> None:
    tracer, _, logger_provider, processor = logging_to(writer=writer)
    emit = logger_provider.get_logger("tests.hostile").emit
    job_id = f"hostile-{writer}"
    with (
        job_attempt("render", job_id, "thumbnail", tracer=tracer),
        step("R\x00\x1b", tracer=tracer),
    ):
        emit(body="red \x1b[31m\x00 bell \x07 \ud800", severity_text="INFO")
        emit(body="y" * 1_000_000, severity_text="INFO")
        emit(body=_nested(5_000), severity_text="INFO")  # beyond what JSON or marshal nest
        emit(body=b"\xff\x00raw", severity_text="INFO")
        emit(body="attributes", severity_text="WARN", attributes={"deep": _nested(100)})
        emit(
            body="many", severity_text="WARN", attributes={f"a{n}": "v" * 1000 for n in range(100)}
        )
    assert processor.force_flush(10_000)
    found = rows(conn, LOG_ROWS, job_id)
    messages = [r[3] for r in found]
    assert messages[0] == "red \x1b[31m\ufffd bell \x07 \ufffd"  # readers escape what remains
    assert messages[1].startswith("y" * 8192)
    assert messages[1].endswith("... [991808 more characters cut]")
    assert messages[2] == "<log body nested too deep to show>"
    assert messages[3] == "\ufffd\ufffdraw"
    assert [r[0] for r in found] == ["R\ufffd\x1b"] * 6
    assert found[4][4]["attributes"]["deep"]["k"]["k"]["k"]  # kept, within the depth rules
    assert len(found) == 6
    assert found[5][4]["severity"] == "WARN"  # the attributes were cut to fit, not the detail
    kept = found[5][4]["attributes"]
    assert 0 < kept.pop("_dropped_attributes") < 100
    assert kept == {f"a{n}": "v" * 1000 for n in range(len(kept))}


def test_the_docs_example_records_its_line_and_progress(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    page = (Path(__file__).parents[2] / "docs" / "logs.md").read_text("utf-8")
    (code,) = re.findall(r"```python\n(.*?)```", page, re.DOTALL)
    root = logging.getLogger()
    handlers = list(root.handlers)
    try:
        with warnings.catch_warnings():  # the SDK's LoggingHandler is deprecated in 1.39+
            warnings.simplefilter("ignore", DeprecationWarning)
            namespace = {"DSN": dsn}
            exec(compile(code, "docs/logs.md", "exec"), namespace)  # the page's own code
    finally:
        for handler in set(root.handlers) - set(handlers):
            root.removeHandler(handler)
    job_id = namespace["job_id"]
    assert rows(conn, LOG_ROWS, job_id)[0][:4] == ("RENDER", None, None, "rendering 24 frames")
    assert rows(conn, "SELECT detail FROM job_event WHERE type = 'STEP'") == [({"pct": 50},)]


@pytest.mark.parametrize("writer", ["thread", "process"])
@pytest.mark.parametrize(
    ("log_last", "polled_between"),
    [(True, True), (False, True), (True, False)],
    ids=["log-event-last", "span-event-last", "log-event-last-span-event-unpolled"],
)
def test_span_event_and_log_event_progress_the_newest_wins(
    logging_to: Callable[..., Logging],
    conn: psycopg.Connection[Any],
    writer: str,
    log_last: bool,
    polled_between: bool,
) -> None:
    """Unpolled: the older span event is read by the flush's poll after the newer log record."""
    tracer, _, logger_provider, processor = logging_to(writer=writer)
    events = logger_provider.get_logger("tests.events")
    job_id = f"order-{writer}-{log_last}-{polled_between}"
    with job_attempt("render", job_id, "thumbnail", tracer=tracer):
        with step("RENDER", tracer=tracer) as span:
            if log_last:
                span.add_event("progress", {"from": "span"})
                if polled_between:
                    assert processor.force_flush(10_000)  # the poll has read the span event
                events.emit(event_name="progress", attributes={"from": "log"})
            else:
                events.emit(event_name="progress", attributes={"from": "log"})
                assert processor.force_flush(10_000)
                span.add_event("progress", {"from": "span"})
        assert processor.force_flush(10_000)
    assert processor.force_flush(10_000)
    detail = rows(conn, "SELECT detail FROM job_event WHERE job_id = %s AND type = 'STEP'", job_id)
    assert detail == [({"from": "log" if log_last else "span"},)]
