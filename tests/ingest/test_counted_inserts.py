"""A request's metrics are taken from the rows it inserted where those are all of its complete
attempts' rows (`counting.written_whole`): they count what reading the rows back counts, the
durations as job_duration reads them, and a job whose rows were derived before prune forgot
it is read back as before."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_jobsteps._core.batch import EventRow
from otel_jobsteps._ingest.counting import attempt_columns, counted, inserted_rows
from otel_jobsteps._ingest.decode import decode_protobuf
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging
from otel_jobsteps._telemetry.metrics import Committed
from otel_jobsteps.attributes import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID, JOB_STEP_KEY, JOB_TYPE
from otel_jobsteps.sql import qualified_queries
from tests.ingest.requests import proto_spans, request_of

_DURATION = (
    "SELECT extract(epoch FROM job_duration(timestamptz 'epoch' + %s * interval '1 microsecond',"
    " timestamptz 'epoch' + %s * interval '1 microsecond'))::float8"
)


@pytest.mark.parametrize(
    ("created_us", "ended_us"),
    [
        pytest.param(1_764_000_000_000_000, 1_764_000_000_123_457, id="plain"),
        pytest.param(1_764_000_000_000_000, 1_763_999_999_000_000, id="ended-before-start"),
        pytest.param(0, 2**53 - 1, id="the-longest-taken-as-written"),
        pytest.param(2**53 - 3, 2**53 - 2, id="the-latest-taken-as-written"),
    ],
)
def test_inserted_durations_read_as_job_duration(
    conn: psycopg.Connection[Any], created_us: int, ended_us: int
) -> None:
    row = EventRow("d", "j", "t", 1, "STEP", "K", "COMPLETED", None, None, "tr", "sp", None,
                   created_us, ended_us)  # fmt: skip
    [found] = inserted_rows(Committed(step_rows=[row]), {("d", "j", 1)})
    read = conn.execute(_DURATION, (created_us, ended_us)).fetchone()
    assert read is not None
    assert found[-1] == read[0]


def _jobs(domain: str, count: int, at: int = 1_764_000_000 * 10**9) -> list[Span]:
    """Whole jobs of two steps (the second FAILED), one trace each, from ``at``."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    for number in range(count):
        names = {JOB_DOMAIN: domain, JOB_ID: f"j{number}", JOB_TYPE: "t", JOB_ATTEMPT: 1}
        job = tracer.start_span("job", attributes=names, start_time=at)
        inside = trace.set_span_in_context(job)
        for index, key in enumerate(("RENDER", "SAVE")):
            begin = at + (index + 1) * 10**9
            step = tracer.start_span(key, inside, attributes={JOB_STEP_KEY: key}, start_time=begin)
            if key == "SAVE":
                step.set_status(trace.StatusCode.ERROR, "disk full")
            step.end(begin + 123_456_789)
        job.end(at + 5 * 10**9)
    provider.shutdown()
    return proto_spans(exporter.get_finished_spans())


@pytest.fixture
def staging(second_dsn: str) -> Iterator[tuple[Staging, list[Committed]]]:
    found: list[Committed] = []
    staging = Staging(CollectSettings(second_dsn, connections=1), on_committed=found.append)
    yield staging, found
    staging.close()


def _counts(committed: list[Committed]) -> tuple[Counter[Any], Counter[Any]]:
    return (
        Counter(step for c in committed for step in c.closed_steps()),
        Counter(attempt for c in committed for attempt in c.finished_attempts()),
    )


def _read_back(dsn: str, domain: str) -> Committed:
    """What `counted_rows` counts of the domain's attempts, as their rows are now."""
    with psycopg.connect(dsn) as conn:
        attempts = conn.execute(
            "SELECT DISTINCT domain, job_id, attempt FROM job_log WHERE domain = %s", (domain,)
        ).fetchall()
        query = qualified_queries("ingest.sql", "public")["counted_rows"]
        rows = conn.execute(query, attempt_columns([tuple(a) for a in attempts])).fetchall()
    return counted(rows)


def _forget_staging(dsn: str, domain: str) -> None:
    """What prune leaves of the domain's jobs once forgotten: their rows only."""
    with psycopg.connect(dsn) as conn:
        for table in ("otlp_span", "otlp_attempt", "otlp_job"):
            conn.execute(f"DELETE FROM {table} WHERE domain = %s", (domain,))  # type: ignore[arg-type]
        conn.execute("DELETE FROM otlp_trace")


def _receive(staging: Staging, spans: list[Span]) -> None:
    decoded = decode_protobuf(request_of(spans).SerializeToString())
    staging.receive(decoded.spans, decoded.wire)


def test_a_request_of_whole_jobs_counts_what_their_rows_say(
    staging: tuple[Staging, list[Committed]], second_dsn: str
) -> None:
    receiver, found = staging
    far = 2**64 - 10 * 10**9  # 2554: stored rounded, so read back
    _receive(receiver, _jobs("inserted", 3) + _jobs("inserted-far", 1, at=far))
    steps, attempts = _counts(found)
    assert sum(steps.values()) == 8
    assert sum(attempts.values()) == 4
    read = [_read_back(second_dsn, "inserted"), _read_back(second_dsn, "inserted-far")]
    assert (steps, attempts) == _counts(read)


def test_a_job_forgotten_by_prune_counts_its_rows_read_back(
    staging: tuple[Staging, list[Committed]], second_dsn: str
) -> None:
    receiver, found = staging
    spans = _jobs("forgotten", 2)
    _receive(receiver, spans)
    _forget_staging(second_dsn, "forgotten")
    found.clear()
    _receive(receiver, spans)  # new to collect again, beside the rows derived before
    assert _counts(found) == _counts([_read_back(second_dsn, "forgotten")])
