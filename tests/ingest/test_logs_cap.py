"""The per-step log cap through collect: a request past the cap costs what the request holds,
whatever the step's history (the step's staged records are not read again), and the same
records give the processor's LOG rows and dropped-count rows however they arrive."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from opentelemetry._logs import SeverityNumber
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from benchmarks.logs import CHATTY_REQUEST, chatty_step
from otel_jobsteps import JobStepsProcessor, job_attempt, step
from otel_jobsteps._ingest.decode import decode_protobuf
from otel_jobsteps._ingest.logs import decode_logs_protobuf
from otel_jobsteps._ingest.session import Session
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging
from otel_jobsteps._ingest.state import JobState, load
from tests.ingest.collector import table_rows
from tests.ingest.requests import (
    logs_request_of,
    proto_logs,
    proto_spans,
    request_of,
    start_markers,
)

CAP = 3


def _dropped(dsn: str, job_id: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        found = conn.execute(
            "SELECT (detail ->> 'dropped')::int FROM job_event WHERE job_id = %s"
            " AND type = 'LOG' AND detail ? 'dropped' ORDER BY created_at",
            (job_id,),
        ).fetchall()
    return [row[0] for row in found]


@pytest.mark.parametrize("running", [False, True], ids=["ended", "running"])
def test_a_request_past_the_cap_reads_what_it_brings_not_the_steps_history(
    second_dsn: str, monkeypatch: pytest.MonkeyPatch, running: bool
) -> None:
    staging = Staging(CollectSettings(second_dsn, connections=1))
    try:
        chatty = chatty_step(staging, second_dsn, "cap-cost", 200_000, running=running)
        seen: list[tuple[str, int]] = []
        execute = Session.execute

        def counted(session: Session, name: str, params: dict[str, Any]) -> psycopg.Cursor[Any]:
            cursor = execute(session, name, params)
            seen.append((name, cursor.rowcount))
            return cursor

        monkeypatch.setattr(Session, "execute", counted)
        chatty.send(chatty.request(progress=running))
        monkeypatch.undo()
    finally:
        staging.close()
    # O(request): a handful of statements, none reading the 200,000 records staged before.
    assert sum(count for _, count in seen) <= 5 * CHATTY_REQUEST, seen
    if not running:  # the step's dropped-count row took the request's 100 lines
        assert _dropped(second_dsn, "cap-cost") == [200_000 + CHATTY_REQUEST - 1_000]


def _story(recording: tuple[TracerProvider, LoggerProvider], job_id: str) -> None:
    """Lines between steps and in two runs of step A (past the cap of 3 per key) and in B,
    progress log events among them."""
    tracer = recording[0].get_tracer("tests")
    logger = recording[1].get_logger("tests")

    def lines(what: str, count: int) -> None:
        for number in range(count):
            logger.emit(severity_number=SeverityNumber.INFO, body=f"{what} {number}")

    with job_attempt("caps", job_id, "t", tracer=tracer):
        lines("queued", 2)
        with step("A", tracer=tracer):
            lines("a", 2)
            logger.emit(event_name="progress", attributes={"pct": 50})
            lines("a more", 5)
        with step("B", tracer=tracer):
            lines("b", 2)
        with step("A", tracer=tracer):
            lines("a again", 2)
        lines("done", 3)


def _recorded(dsn: str) -> tuple[list[Any], list[LogRecord], str]:
    """The story through the processor (cap 3) into ``dsn``; its spans and records as OTLP."""
    spans, records = InMemorySpanExporter(), InMemoryLogRecordExporter()
    processor = JobStepsProcessor(dsn, logs_max_per_step=CAP)
    tracers, loggers = TracerProvider(), LoggerProvider()
    tracers.add_span_processor(processor)
    tracers.add_span_processor(SimpleSpanProcessor(spans))
    loggers.add_log_record_processor(processor)
    loggers.add_log_record_processor(SimpleLogRecordProcessor(records))
    job_id = f"cap-{uuid.uuid4().hex[:10]}"
    try:
        _story((tracers, loggers), job_id)
        assert processor.force_flush(10_000)
    finally:
        loggers.shutdown()
        tracers.shutdown()
    return proto_spans(spans.get_finished_spans()), proto_logs(records.get_finished_logs()), job_id


@pytest.fixture
def capped(second_dsn: str) -> Iterator[Staging]:
    """A receiver with the story's cap whose attempts settle as soon as they may."""
    found = Staging(CollectSettings(second_dsn, connections=1, logs_max_per_step=CAP,
                                    settle_after_s=0.0))  # fmt: skip
    yield found
    found.close()


def _send_spans(staging: Staging, spans: list[Any]) -> None:
    decoded = decode_protobuf(request_of(spans).SerializeToString())
    staging.receive(decoded.spans, decoded.wire)


def _send_logs(staging: Staging, records: list[LogRecord]) -> None:
    for start in range(0, len(records), 2):  # as an exporter sends them: in order, a few at once
        part = logs_request_of(records[start : start + 2]).SerializeToString()
        decoded = decode_logs_protobuf(part)
        staging.receive_logs(decoded.logs, decoded.wire, decoded.keys)


def _state(dsn: str, job_id: str) -> JobState | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT state FROM otlp_job WHERE job_id = %s", (job_id,)).fetchone()
    return None if row is None or row[0] is None else load(bytes(row[0]))


def _time(record: LogRecord) -> int:
    return record.time_unix_nano or record.observed_time_unix_nano


def _as_they_start(
    staging: Staging, spans: list[Any], records: list[LogRecord]
) -> list[tuple[Any, ...]]:
    """Each span's start marker when it starts, then the records logged until the next start
    (as a worker with start markers sends them): no record request derives the job in full,
    progress included (the state holds its step open). Returns the job_event rows then."""
    markers = sorted(start_markers(spans), key=lambda span: span.start_time_unix_nano)
    starts = [marker.start_time_unix_nano for marker in markers] + [2**64]
    for number, marker in enumerate(markers):
        _send_spans(staging, [marker])
        derived = staging.stats.get("jobs_derived_in_full")
        _send_logs(staging, [r for r in records if starts[number] <= _time(r) < starts[number + 1]])
        assert staging.stats.get("jobs_derived_in_full") == derived
    return table_rows(staging.settings.dsn, "%")[0]


def _lines(events: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The LOG rows that are lines (the dropped-count rows are written when steps close)."""
    return [row for row in events if row[4] == "LOG" and "dropped" not in row[7]]


@pytest.mark.parametrize(
    "arrival", ["spans_first", "markers_first", "as_they_start", "logs_first", "settled"]
)
def test_lines_before_at_and_past_the_cap_give_the_processors_rows(
    capped: Staging, dsn: str, second_dsn: str, arrival: str
) -> None:
    spans, records, job_id = _recorded(dsn)
    running: list[tuple[Any, ...]] = []
    if arrival == "as_they_start":
        running = _as_they_start(capped, spans, records)
        _send_spans(capped, spans)
    elif arrival == "logs_first":
        _send_logs(capped, records)
    if arrival != "as_they_start":
        _send_spans(capped, start_markers(spans) if arrival == "markers_first" else spans)
    if arrival == "settled":
        assert capped.settle()[0] == 1
    if arrival not in ("logs_first", "as_they_start"):
        _send_logs(capped, records)
    if arrival == "markers_first":
        state = _state(second_dsn, job_id)
        assert state is not None
        # The running attempt's cap counts, kept with the job's state by the lines written.
        ((_, attempt),) = state.attempts
        assert attempt.logs == {None: [3, 2], "A": [3, 6], "B": [2, 0]}
        _send_spans(capped, spans)
    live_events, live_logs = table_rows(dsn, job_id)
    events, logs = table_rows(second_dsn, job_id)
    assert logs == live_logs
    if arrival == "settled":  # a settled attempt's progress log event changes nothing
        events = [row for row in events if row[4] == "LOG"]
        live_events = [row for row in live_events if row[4] == "LOG"]
    assert events == live_events
    if running:  # written by the lines alone, before the spans ended: the same lines, progress
        assert _lines(running) == _lines(live_events)
        first = next(row[7] for row in running if row[4] == "STEP")
        assert first == next(row[7] for row in live_events if row[4] == "STEP") == {"pct": 50}
    dropped = [row[7]["dropped"] for row in live_events if row[4] == "LOG" and "dropped" in row[7]]
    assert dropped == [4, 2, 2]  # A's first run, its second, and the lines between steps
