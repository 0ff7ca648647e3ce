"""The derivation state kept in ``otlp_job.state`` is a format (docs/ingest.md, "The stored
state"): versioned JSON naming no module, read back equal; a state it cannot read (a pickle of
the release before, another version) derives the job in full, with the rows a fresh derivation
gives and no foreign row lost."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from psycopg import sql

from otel_jobsteps._ingest import request
from otel_jobsteps._ingest.decode import decode_protobuf
from otel_jobsteps._ingest.logs import decode_logs_protobuf
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging
from otel_jobsteps._ingest.state import FORMAT_VERSION, JobState, dump, load
from tests.ingest.collector import table_rows
from tests.ingest.histories import AttemptPlan, History, StepPlan, tell
from tests.ingest.requests import logs_request_of, request_of
from tests.ingest.stories import Recording

FIXTURE = Path(__file__).parent / "fixtures" / "pickled_state.json"
# In an order their references allow; job_event and job_log keep their ids.
TABLES = ("otlp_trace", "otlp_span", "otlp_job", "otlp_attempt", "job_event", "job_log")
JOB = "upgrade-1"


@pytest.fixture
def fixture() -> dict[str, Any]:
    found: dict[str, Any] = json.loads(FIXTURE.read_text("utf-8"))
    return found


@pytest.fixture
def staging(second_dsn: str) -> Iterator[Staging]:
    found = Staging(CollectSettings(second_dsn, connections=1))
    yield found
    found.close()


def _send(staging: Staging, body_hex: str) -> None:
    decoded = decode_protobuf(bytes.fromhex(body_hex))
    staging.receive(decoded.spans, decoded.wire)


def _restore(dsn: str, tables: dict[str, list[dict[str, Any]]]) -> None:
    """The rows as the release before left them (the new columns as its migration fills)."""
    with psycopg.connect(dsn) as conn:
        for table in TABLES:
            name = sql.Identifier(table)
            for row in tables[table]:
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {} OVERRIDING SYSTEM VALUE"
                        " SELECT * FROM json_populate_record(NULL::{}, %s::json)"
                    ).format(name, name),
                    (json.dumps(row),),
                )
        for table in ("job_event", "job_log"):
            conn.execute(
                sql.SQL(
                    "SELECT setval(pg_get_serial_sequence({}, 'id'), max(id)) FROM {}"
                    " HAVING count(*) > 0"
                ).format(sql.Literal(table), sql.Identifier(table))
            )


def test_a_state_of_the_release_before_gives_the_rows_of_a_fresh_derivation(
    fixture: dict[str, Any], staging: Staging, dsn: str, second_dsn: str
) -> None:
    _restore(second_dsn, fixture["tables"])
    with psycopg.connect(second_dsn, autocommit=True) as conn:
        (stored,) = conn.execute("SELECT state FROM otlp_job").fetchone() or (None,)
        assert stored is not None
        assert bytes(stored)[:1] == b"\x80"  # a pickle
        conn.execute(
            "INSERT INTO job_event (domain, job_id, attempt, type, message, created_at)"
            " VALUES ('history', %s, 1, 'NOTE', 'by hand', '2027-01-15T08:00:00.004Z')",
            (JOB,),
        )
        foreign = conn.execute("SELECT * FROM job_event WHERE derived IS NULL").fetchall()
    applied = fixture["applied"]
    for body in fixture["requests"][applied:]:
        _send(staging, body)
    assert staging.stats.get("jobs_resumed") == 0  # the pickle is no state: derived in full
    with psycopg.connect(second_dsn) as conn:
        (stored,) = conn.execute("SELECT state FROM otlp_job").fetchone() or (None,)
    assert load(bytes(stored)) is not None  # the new format, resumed next time
    fresh = Staging(CollectSettings(dsn, connections=1))
    try:
        for body in fixture["requests"]:
            _send(fresh, body)
    finally:
        fresh.close()
    with psycopg.connect(second_dsn) as conn:
        assert conn.execute("SELECT * FROM job_event WHERE derived IS NULL").fetchall() == foreign
        conn.execute("DELETE FROM job_event WHERE derived IS NULL")
        conn.commit()
    assert table_rows(second_dsn, JOB) == table_rows(dsn, JOB)


# Fields a state does not keep: a restored open step is written already and waits for no
# progress (its debounce), its row is in no batch (segment), and it belongs to its attempt.
NOT_KEPT = {"last_write", "pending", "due", "segment"}
# Steps with progress events and log lines (a progress log record among them), two attempts:
# open steps, reported progress, log counts, start markers and first starts in the states.
_STEP = StepPlan(duration_us=3_000, pause_us=1_000, progress=True, logs=True, event=True)
_ATTEMPTS = (AttemptPlan(0, 1, (_STEP,), fails=True), AttemptPlan(0, 9_000, (_STEP,) * 3))
_HISTORY = History(_ATTEMPTS, tick_ns=1)


def _plain(value: Any, owner: Any = None) -> Any:
    """Every field of a state's objects as plain values (tuples as lists, as JSON has them)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _plain(getattr(value, f.name), value)
            for f in dataclasses.fields(value)
            if f.name not in NOT_KEPT and (owner is None or getattr(value, f.name) is not owner)
        } | {"class": type(value).__name__}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {name: _plain(item) for name, item in zip(value._fields, value, strict=True)}
    if isinstance(value, dict):
        return [[_plain(k), _plain(v)] for k, v in value.items()]
    if isinstance(value, set | frozenset):
        return sorted(_plain(item) for item in value)
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _live_requests(spans: list[Span], logs: list[LogRecord]) -> list[tuple[str, Any]]:
    """Every span's start marker at its start, the span at its end, each record at its time."""
    timed: list[tuple[int, int, str, Any]] = []
    for span in spans:
        marker = Span()
        marker.CopyFrom(span)
        marker.ClearField("events")
        marker.ClearField("status")
        marker.end_time_unix_nano = 0
        timed += [(span.start_time_unix_nano, 0, "spans", marker)]
        timed += [(span.end_time_unix_nano, 2, "spans", span)]
    timed += [(record.time_unix_nano, 1, "logs", record) for record in logs]
    timed.sort(key=lambda item: item[:2])
    return [(kind, item) for *_, kind, item in timed]


def test_every_state_a_job_leaves_reads_back_equal(
    recording: Recording, staging: Staging, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The states a derivation writes, resumed or in full, read back with every field kept."""
    written: list[tuple[Any, bytes | None]] = []

    def spy(state: JobState) -> bytes | None:
        blob = dump(state)
        written.append((_plain(state), blob))
        return blob

    monkeypatch.setattr(request, "dump", spy)
    job_id = f"f-{uuid.uuid4().hex[:12]}"
    spans = recording.spans(
        lambda tracer, _: tell(_HISTORY, tracer, job_id, logger=recording.logger), ""
    )
    for kind, item in _live_requests(spans, recording.logs()):
        if kind == "spans":
            _send(staging, request_of([item]).SerializeToString().hex())
        else:
            found = decode_logs_protobuf(logs_request_of([item]).SerializeToString())
            staging.receive_logs(found.logs, found.wire, found.keys)
    assert staging.stats.get("jobs_resumed") > 0
    assert staging.stats.get("jobs_derived_in_full") > 0
    for state, blob in written:
        assert blob is not None
        assert b"otel_jobsteps" not in blob  # no module path: moving code changes nothing
        assert json.loads(blob)["v"] == FORMAT_VERSION
        assert _plain(load(blob)) == state
    kept = "".join(blob.decode() for _, blob in written if blob)
    for what in ('"open":{"key"', '"reported":{', '"logs":[[', '"markers":[{', '"firsts":[{'):
        assert what in kept  # what the states held, so what this test compared


@pytest.mark.parametrize(
    "blob",
    [
        pytest.param(b"\x80\x05junk", id="a pickle"),
        pytest.param(b'{"v":2,"frontier":1}', id="another version"),
        pytest.param(b'{"v":1,"frontier":1}', id="a field missing"),
        pytest.param(b'{"v":1,', id="damaged"),
        pytest.param(b"[1]", id="not an object"),
    ],
)
def test_a_state_that_does_not_read_is_no_state(blob: bytes) -> None:
    assert load(blob) is None
