"""Log records through collect's staging: records of a settled attempt still become their LOG
rows (the steps untouched), records whose span never comes wait, bounded, then are dropped."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from opentelemetry._logs import SeverityNumber
from opentelemetry.trace import Tracer

from otel_jobsteps import job_attempt, prune, step
from otel_jobsteps._ingest.decode import decode_protobuf
from otel_jobsteps._ingest.logs import decode_logs_protobuf
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Receipt, Staging
from tests.ingest.collector import table_rows
from tests.ingest.requests import logs_request_of, proto_logs, proto_spans, request_of
from tests.ingest.stories import Recording
from tests.ingest.test_logs_exporter import _recorded


@pytest.fixture
def staging(second_dsn: str) -> Iterator[Staging]:
    """A receiver's staging whose attempts settle as soon as they may."""
    found = Staging(CollectSettings(second_dsn, settle_after_s=0.0, connections=1))
    yield found
    found.close()


def _send_logs(staging: Staging, records: list[object]) -> Receipt:
    decoded = decode_logs_protobuf(logs_request_of(records).SerializeToString())  # type: ignore[arg-type]
    return staging.receive_logs(decoded.logs, decoded.wire, decoded.keys)


def test_records_of_a_settled_attempt_become_its_log_rows(
    staging: Staging, dsn: str, second_dsn: str
) -> None:
    spans, records, job_id = _recorded(dsn)
    decoded = decode_protobuf(request_of(proto_spans(spans)).SerializeToString())
    staging.receive(decoded.spans, decoded.wire)
    steps_before = table_rows(second_dsn, job_id)
    assert staging.settle()[0] == 1
    wire = proto_logs(records)
    half = len(wire) // 2
    assert _send_logs(staging, wire[:half]).staged == half
    assert _send_logs(staging, wire).duplicates == half  # a retry of the first part, and more

    live_events, live_logs = table_rows(dsn, job_id)
    events, logs = table_rows(second_dsn, job_id)
    assert logs == live_logs == steps_before[1]
    assert [row for row in events if row[4] == "LOG"] == [
        row for row in live_events if row[4] == "LOG"
    ]
    # The steps stay as derived from the spans: a settled attempt is not derived again.
    assert [row for row in events if row[4] != "LOG"] == steps_before[0]
    # prune forgets the settled attempt's staged records with its spans.
    prune(second_dsn, timedelta(microseconds=1))
    with psycopg.connect(second_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM otlp_log").fetchone() == (0,)


def test_records_wait_for_their_span_bounded_then_are_dropped(dsn: str, second_dsn: str) -> None:
    settings = CollectSettings(
        second_dsn, settle_after_s=0.0, settle_open_after_s=0.0, max_waiting_logs_per_trace=2
    )
    staging = Staging(settings)
    try:
        _, records, _ = _recorded(dsn)
        wire = proto_logs(records)[:3]
        receipt = _send_logs(staging, wire)
        assert (receipt.staged, receipt.waiting, receipt.rejected) == (2, 2, 1)
        assert staging.settle() == (0, 0)
        with psycopg.connect(second_dsn) as conn:
            left = conn.execute("SELECT count(*) FROM otlp_log").fetchone()
        assert left == (0,)
        assert staging.stats.get("logs_orphaned") == 2
    finally:
        staging.close()


def test_hostile_bodies_are_stored_as_the_processor_stores_them(
    recording: Recording, staging: Staging, dsn: str, second_dsn: str
) -> None:
    deep: dict[str, object] = {"leaf": "\x1b[31mred\x00"}
    for level in range(25):  # OTLP encoders stop near 30 (protobuf nesting limit of 100)
        deep = {f"level{level}": deep}
    bodies: list[object] = ["ctl \x00\x07\x1b[2J\u202e<script>", "x" * 1_000_000, deep, b"\xff\x00"]

    def story(tracer: Tracer, _: str) -> None:
        with job_attempt("hostile", "h-1", "t", tracer=tracer), step("S", tracer=tracer):
            for body in bodies:
                recording.logger.emit(severity_number=SeverityNumber.WARN, body=body)

    decoded = decode_protobuf(request_of(recording.spans(story, "")).SerializeToString())
    staging.receive(decoded.spans, decoded.wire)
    _send_logs(staging, recording.logs())
    live = table_rows(dsn, "h-1")
    assert table_rows(second_dsn, "h-1") == live
    messages = [row[8] for row in live[0] if row[4] == "LOG"]
    assert len(messages) == len(bodies)
    assert all("\x00" not in message and len(message) < 9_000 for message in messages)


def test_lines_over_the_cap_give_the_processors_dropped_count_rows(
    dsn: str, second_dsn: str
) -> None:
    spans, records, job_id = _recorded(dsn, logs_max_per_step=1)
    staging = Staging(CollectSettings(second_dsn, connections=1, logs_max_per_step=1))
    try:
        decoded = decode_protobuf(request_of(proto_spans(spans)).SerializeToString())
        staging.receive(decoded.spans, decoded.wire)
        wire = proto_logs(records)
        for start in range(0, len(wire), 2):  # under the cap at first: written as they come
            _send_logs(staging, wire[start : start + 2])
    finally:
        staging.close()
    live = table_rows(dsn, job_id)
    assert table_rows(second_dsn, job_id) == live
    assert any(row[4] == "LOG" and (row[7] or {}).get("dropped") for row in live[0])


def test_late_lines_past_the_cap_of_a_settled_attempt_are_counted_as_live(
    dsn: str, second_dsn: str
) -> None:
    spans, records, job_id = _recorded(dsn, logs_max_per_step=1)
    settings = CollectSettings(second_dsn, settle_after_s=0.0, connections=1, logs_max_per_step=1)
    staging = Staging(settings)
    try:
        decoded = decode_protobuf(request_of(proto_spans(spans)).SerializeToString())
        staging.receive(decoded.spans, decoded.wire)
        assert staging.settle()[0] == 1
        wire = proto_logs(records)
        for start in range(0, len(wire), 2):  # some rows past the cap come in a later request
            _send_logs(staging, wire[start : start + 2])
    finally:
        staging.close()
    live_events, _ = table_rows(dsn, job_id)
    events, _ = table_rows(second_dsn, job_id)
    lines = [row for row in events if row[4] == "LOG"]
    assert lines == [row for row in live_events if row[4] == "LOG"]
    assert any((row[7] or {}).get("dropped") for row in lines)
