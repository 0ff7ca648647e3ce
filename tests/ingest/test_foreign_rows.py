"""collect owns only its rows: events another program inserts with plain SQL, and a watcher's
``record_job_event``, survive every request that derives their job in full again (a start
marker's ended copy, a progress log event, a span out of order, a step past its log cap), and
the rows collect derived are the processor's, as if the foreign rows were not there."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JobStepsProcessor, job_detail, record_job_event
from otel_jobsteps._ingest.decode import decode_protobuf
from otel_jobsteps._ingest.logs import decode_logs_protobuf
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging
from tests.ingest.collector import EVENT_ROWS, LOG_ROWS
from tests.ingest.requests import logs_request_of, proto_logs, proto_spans, request_of
from tests.ingest.test_logs_exporter import _recorded

DOMAIN = "render"  # _recorded's story
Request = tuple[str, list[Any]]  # "spans" or "logs", what it carries
# The job_event rows collect did not write, with their ids, as read back.
FOREIGN_EVENTS = (
    "SELECT id, attempt, type, step_key, step_status, message, detail, created_at, ended_at,"
    " derived FROM job_event WHERE job_id = %s AND derived IS NOT TRUE ORDER BY id"
)


class Watcher:
    """Another program writing the job's ordinary events: a processor of its own on collect's
    database (``record_job_event``), and plain SQL."""

    def __init__(self, dsn: str, job_id: str) -> None:
        self.dsn, self.job_id = dsn, job_id
        self.processor = JobStepsProcessor(dsn)
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)
        self.count = 0

    def write(self, at: datetime) -> None:
        """One STALLED event through the processor and one NOTE by INSERT, dated ``at``."""
        self.count += 1
        record_job_event(
            DOMAIN, self.job_id, "STALLED", f"watcher {self.count}",
            tracer=self.provider.get_tracer("watcher"), seen=self.count,
        )  # fmt: skip
        assert self.processor.force_flush(10_000)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO job_event (domain, job_id, attempt, type, message, detail,"
                " created_at) VALUES (%s, %s, 1, 'NOTE', %s, '{\"by\": \"sql\"}', %s)",
                (DOMAIN, self.job_id, f"note {self.count}", at),
            )

    def close(self) -> None:
        self.provider.shutdown()


@pytest.fixture
def watcher(second_dsn: str) -> Iterator[Callable[[str], Watcher]]:
    made: list[Watcher] = []

    def make(job_id: str) -> Watcher:
        made.append(Watcher(second_dsn, job_id))
        return made[-1]

    yield make
    for found in made:
        found.close()


def _by_end(spans: list[Span]) -> list[Span]:
    return sorted(spans, key=lambda span: span.end_time_unix_nano)


def _marker_then_ended(spans: list[Span], logs: list[LogRecord]) -> list[Request]:
    """The job span's start marker first, then each span as it ends, then the records."""
    job = next(span for span in spans if not span.parent_span_id)
    marker = Span()
    marker.CopyFrom(job)
    marker.ClearField("status")
    marker.end_time_unix_nano = 0
    return [("spans", [marker]), *(("spans", [s]) for s in _by_end(spans)), ("logs", logs)]


def _progress_log_event(spans: list[Span], logs: list[LogRecord]) -> list[Request]:
    """The spans, then each record alone: the progress log event derives its job in full."""
    return [("spans", spans), *(("logs", [record]) for record in logs)]


def _out_of_order(spans: list[Span], logs: list[LogRecord]) -> list[Request]:
    """Each span as it ends, but the first step's after the second's."""
    first, second, *rest = _by_end(spans)
    ended = [("spans", [second]), ("spans", [first]), *(("spans", [s]) for s in rest)]
    return [*ended, ("logs", logs)]


def _past_the_cap(spans: list[Span], logs: list[LogRecord]) -> list[Request]:
    """The spans, then the records two by two: the step's third line passes a cap of one."""
    return [("spans", spans), *(("logs", logs[i : i + 2]) for i in range(0, len(logs), 2))]


@pytest.mark.parametrize(
    ("requests", "cap"),
    [
        pytest.param(_marker_then_ended, 1000, id="start marker, then its ended copy"),
        pytest.param(_progress_log_event, 1000, id="a progress log event"),
        pytest.param(_out_of_order, 1000, id="spans out of order"),
        pytest.param(_past_the_cap, 1, id="a step past its log cap"),
    ],
)
def test_foreign_events_survive_every_derivation_in_full(
    dsn: str,
    second_dsn: str,
    watcher: Callable[[str], Watcher],
    requests: Callable[[list[Span], list[LogRecord]], list[Request]],
    cap: int,
) -> None:
    readable, records, job_id = _recorded(dsn, logs_max_per_step=cap)
    spans, logs = proto_spans(readable), proto_logs(records)
    foreign = watcher(job_id)
    staging = Staging(CollectSettings(second_dsn, connections=1, logs_max_per_step=cap))
    job_start = min(span.start_time_unix_nano for span in spans)
    kept: list[tuple[Any, ...]] = []
    derived_in_full = 0
    try:
        for number, (kind, items) in enumerate(requests(spans, logs)):
            before = staging.stats.get("jobs_derived_in_full")
            _send(staging, kind, items)
            if kept and staging.stats.get("jobs_derived_in_full") > before:
                derived_in_full += 1
            assert _foreign_rows(second_dsn, job_id) == kept  # unchanged, none lost
            foreign.write(_at(job_start + (number + 1) * 1000))  # inside the job's time
            kept = _foreign_rows(second_dsn, job_id)
    finally:
        staging.close()
    assert derived_in_full, "no request derived the job in full after a foreign row came"
    assert len(kept) == 2 * foreign.count
    assert _derived_rows(second_dsn, job_id) == _rows(dsn, job_id)
    _timeline_keeps_foreign_events(second_dsn, job_id, dsn)


def _at(time_ns: int) -> datetime:
    """A timestamptz parameter for ``time_ns`` (µs precision, as the tables keep it)."""
    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=time_ns // 1000)


def _foreign_rows(dsn: str, job_id: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(FOREIGN_EVENTS, (job_id,)).fetchall()


def _rows(dsn: str, job_id: str, where: str = "") -> tuple[list[Any], list[Any]]:
    """The job's rows as `table_rows` reads them, those matching ``where`` only."""
    events = EVENT_ROWS.replace("WHERE job_id LIKE %s", f"WHERE job_id LIKE %s {where}")
    logs = LOG_ROWS.replace("WHERE job_id LIKE %s", f"WHERE job_id LIKE %s {where}")
    with psycopg.connect(dsn) as conn:
        return conn.execute(events, (job_id,)).fetchall(), conn.execute(logs, (job_id,)).fetchall()


def _derived_rows(dsn: str, job_id: str) -> tuple[list[Any], list[Any]]:
    return _rows(dsn, job_id, "AND derived")


def _timeline_keeps_foreign_events(dsn: str, job_id: str, reference_dsn: str) -> None:
    """The read side: the steps are the processor's, the job's events are in time order with
    the foreign ones among them."""
    detail = job_detail(dsn, DOMAIN, job_id)
    reference = job_detail(reference_dsn, DOMAIN, job_id)
    assert detail.steps == reference.steps
    times = [event.created_at for event in detail.events]
    assert times == sorted(times)
    assert {event.type for event in detail.events} >= {"STALLED", "NOTE"}


def test_a_foreign_running_step_is_closed_by_the_next_derived_step_never_deleted(
    dsn: str, second_dsn: str
) -> None:
    """One open step per attempt: collect's next step closes another writer's open STEP row
    FAILED abandoned at its own start, as the processor's would; the row stays, and later
    derivations in full leave it as it is."""
    readable, records, job_id = _recorded(dsn)
    spans, logs = proto_spans(readable), proto_logs(records)
    staging = Staging(CollectSettings(second_dsn, connections=1))
    job_start = min(span.start_time_unix_nano for span in spans)
    first_step = _by_end(spans)[0]
    marker, *later = _marker_then_ended(spans, logs)
    seen: list[list[tuple[Any, ...]]] = []
    try:
        _send(staging, *marker)
        with psycopg.connect(second_dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO job_event (domain, job_id, attempt, type, step_key, step_status,"
                " created_at) VALUES (%s, %s, 1, 'STEP', 'WATCH', 'RUNNING', %s)",
                (DOMAIN, job_id, _at(job_start + 1000)),
            )
        for request in later:
            _send(staging, *request)
            seen.append(_foreign_rows(second_dsn, job_id))
    finally:
        staging.close()
    assert staging.stats.get("jobs_derived_in_full") >= 2
    ((_, _, kind, key, status, message, _, created_at, ended_at, derived),) = seen[0]
    assert (kind, key, status, message, derived) == ("STEP", "WATCH", "FAILED", "abandoned", None)
    assert ended_at == _at(first_step.start_time_unix_nano) > created_at
    assert all(rows == seen[0] for rows in seen)
    assert _derived_rows(second_dsn, job_id) == _rows(dsn, job_id)


def _send(staging: Staging, kind: str, items: list[Any]) -> None:
    if kind == "spans":
        decoded = decode_protobuf(request_of(items).SerializeToString())
        staging.receive(decoded.spans, decoded.wire)
    else:
        found = decode_logs_protobuf(logs_request_of(items).SerializeToString())
        staging.receive_logs(found.logs, found.wire, found.keys)
