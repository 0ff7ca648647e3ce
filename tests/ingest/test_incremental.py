"""Incremental derivation: a request whose spans all come after what a job's state applied
resumes that state (the common live case), anything else derives the job in full; either way
the tables equal the processor's rows for the same spans."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otel_jobsteps._ingest.decode import decode_protobuf
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging
from otel_jobsteps.maintenance import sweep
from tests.ingest.collector import table_rows
from tests.ingest.histories import AttemptPlan, History, StepPlan, as_started, histories, tell
from tests.ingest.requests import request_of
from tests.ingest.stories import Recording


@pytest.fixture
def staging(second_dsn: str) -> Iterator[Staging]:
    found = Staging(CollectSettings(second_dsn, connections=1))
    yield found
    found.close()


def _live_order(spans: list[Span]) -> list[Span]:
    """As an exporter sends them: a marker of each job span at its start, each span at its end."""
    markers = []
    for span in spans:
        if span.name.startswith("job") and "." not in span.name:
            marker = Span()
            marker.CopyFrom(span)
            marker.ClearField("events")
            marker.ClearField("status")
            marker.end_time_unix_nano = 0
            as_started(marker)
            markers.append((span.start_time_unix_nano, 0, marker))
    ended = [(span.end_time_unix_nano, 1, span) for span in spans]
    return [span for *_, span in sorted(markers + ended, key=lambda item: item[:2])]


def _send(staging: Staging, spans: list[Span]) -> None:
    decoded = decode_protobuf(request_of(spans).SerializeToString())
    staging.receive(decoded.spans, decoded.wire)


def _send_each(staging: Staging, spans: list[Span]) -> None:
    for span in spans:
        _send(staging, [span])


def _told(recording: Recording, history: History, job_id: str) -> list[Span]:
    return recording.spans(lambda tracer, _: tell(history, tracer, job_id), "")


_STEP = StepPlan(duration_us=2_000, pause_us=1_000)
_LONG = History((AttemptPlan(0, 1, (_STEP, _STEP, _STEP)),), 1)


def _in_time_order(order: list[Span]) -> list[Span]:
    return order


def _first_step_late(order: list[Span]) -> list[Span]:
    enqueue, marker, first_step, *later_steps, job_end = order
    return [enqueue, marker, *later_steps, first_step, job_end]


@pytest.mark.parametrize(
    ("arrival", "resumed", "in_full"),
    [
        pytest.param(_in_time_order, 3, 2, id="live: the marker and the job's end in full"),
        pytest.param(_first_step_late, 2, 3, id="a step older than the state: in full"),
    ],
)
def test_arrival_decides_between_resuming_and_deriving_in_full(
    recording: Recording,
    staging: Staging,
    dsn: str,
    second_dsn: str,
    arrival: Callable[[list[Span]], list[Span]],
    resumed: int,
    in_full: int,
) -> None:
    job_id = f"i-{uuid.uuid4().hex[:12]}"
    _send_each(staging, arrival(_live_order(_told(recording, _LONG, job_id))))
    assert staging.stats.get("jobs_resumed") == resumed
    assert staging.stats.get("jobs_derived_in_full") == in_full
    assert table_rows(second_dsn, job_id) == table_rows(dsn, job_id)


def test_a_state_that_does_not_load_is_no_state(
    recording: Recording, staging: Staging, dsn: str, second_dsn: str
) -> None:
    job_id = f"i-{uuid.uuid4().hex[:12]}"
    order = _live_order(_told(recording, _LONG, job_id))
    _send(staging, order[:2])
    with psycopg.connect(second_dsn, autocommit=True) as conn:
        conn.execute("UPDATE otlp_job SET state = %s WHERE job_id = %s", (b"\x80\x05junk", job_id))
    _send_each(staging, order[2:])
    assert table_rows(second_dsn, job_id) == table_rows(dsn, job_id)


# Shrunk counterexamples, kept: a failing step with an event span starting as it ends, then a
# step of no time starting then (the event's and that step's ids decided their order).
_EVENT_AT_STEP_END = History(
    (
        AttemptPlan(trace=0, gap_us=7, steps=()),
        AttemptPlan(
            trace=0,
            gap_us=1,
            steps=(
                StepPlan(duration_us=1, pause_us=0, fails=True, event=True),
                StepPlan(duration_us=0, pause_us=0),
            ),
        ),
    ),
    tick_ns=1,
)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=histories, seed=st.integers(0, 2**32 - 1))
@example(history=_EVENT_AT_STEP_END, seed=0)
def test_any_history_in_time_order_gives_the_processors_rows(
    recording: Recording,
    staging: Staging,
    dsn: str,
    second_dsn: str,
    history: History,
    seed: int,
) -> None:
    """The live arrival, in random requests, with a span now and then held back a little."""
    job_id = f"i-{uuid.uuid4().hex[:12]}"
    order = _live_order(_told(recording, history, job_id))
    shuffle = random.Random(seed)
    if len(order) > 2 and shuffle.random() < 0.3:
        late = order.pop(shuffle.randrange(len(order) - 1))
        order.insert(shuffle.randrange(len(order)) + 1, late)
    start = 0
    while start < len(order):
        part = order[start : start + shuffle.randint(1, 3)]
        start += len(part)
        _send(staging, part)
    assert table_rows(second_dsn, job_id) == table_rows(dsn, job_id)


def _span(span_id: int, parent: int, start_ns: int, end_ns: int, **names: Any) -> Span:
    """A span of trace 0707...07 as an exporter would send it."""
    found = Span(name=f"s{span_id}", start_time_unix_nano=start_ns, end_time_unix_nano=end_ns)
    found.trace_id, found.span_id = b"\x07" * 16, span_id.to_bytes(8, "big")
    if parent:
        found.parent_span_id = parent.to_bytes(8, "big")
    for key, value in names.items():
        named = (
            AnyValue(int_value=value) if isinstance(value, int) else AnyValue(string_value=value)
        )
        found.attributes.append(KeyValue(key=key, value=named))
    return found


def test_rows_sweep_closed_under_a_state_derive_the_job_in_full(
    staging: Staging, second_dsn: str
) -> None:
    job_id = f"i-{uuid.uuid4().hex[:12]}"
    names = {"job.domain": "sweep", "job.id": job_id, "job.attempt": 1}
    hour_ago = time.time_ns() - 3600 * 10**9
    minute = 60 * 10**9
    _send(staging, [_span(1, 0, hour_ago, 0, **names)])  # the job, still running
    _send(staging, [_span(2, 1, hour_ago + minute, hour_ago + 2 * minute, **{"job.step.key": "A"})])
    assert staging.stats.get("jobs_resumed") == 1
    sweep(second_dsn, timedelta(minutes=10))  # silent between steps: FAILED abandoned
    with psycopg.connect(second_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM job_log WHERE job_id = %s", (job_id,)).fetchone()
    late = hour_ago + 30 * minute
    _send(staging, [_span(3, 1, late, late + minute, **{"job.step.key": "B"})])
    assert staging.stats.get("jobs_resumed") == 1  # the state holds the attempt open: in full
    with psycopg.connect(second_dsn) as conn:
        rows = conn.execute(
            "SELECT step_key, step_status FROM job_event WHERE job_id = %s ORDER BY id", (job_id,)
        ).fetchall()
        final = conn.execute("SELECT count(*) FROM job_log WHERE job_id = %s", (job_id,)).fetchone()
    assert rows == [("A", "COMPLETED"), ("B", "COMPLETED")]  # derived from the spans, as before
    assert final == (0,)  # sweep's verdict stood in for spans that have now arrived
