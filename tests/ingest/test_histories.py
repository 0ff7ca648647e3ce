"""Whole job histories through collect's staging give the processor's rows: any split, order,
duplicates, start markers, two receivers, and settle passes between requests (a retry long after
the settle window is new work)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otel_jobsteps._ingest.decode import decode_protobuf
from otel_jobsteps._ingest.logs import decode_logs_protobuf
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging
from tests.ingest.collector import table_rows
from tests.ingest.histories import AttemptPlan, History, StepPlan, as_started, histories, tell
from tests.ingest.requests import logs_request_of, request_of, start_markers
from tests.ingest.stories import Recording


@pytest.fixture
def receivers(second_dsn: str) -> Iterator[list[Staging]]:
    """Two receivers' staging on one database; attempts settle as soon as they may."""
    found = [Staging(CollectSettings(second_dsn, settle_after_s=0.0, connections=1)) for _ in "ab"]
    yield found
    for staging in found:
        staging.close()


def _attempt(span: Span, attempt_of: dict[int, int]) -> int:
    return attempt_of.get(int.from_bytes(span.span_id, "big"), 0)


def deliver(
    history: History, recording: Recording, receivers: list[Staging], seed: int, job_id: str
) -> None:
    """Tell ``history``, then hand its spans and log records to the receivers in a random
    arrival: shuffled, some twice, some spans with start markers first, in random requests
    (a record before or after its span), with a settle pass wherever no attempt whose job
    span's ended copy came is still missing a span or a record."""
    attempt_of: dict[int, int] = {}
    spans = recording.spans(
        lambda tracer, _: attempt_of.update(tell(history, tracer, job_id, logger=recording.logger)),
        "",
    )
    records = recording.logs()
    shuffle = random.Random(seed)
    marked = shuffle.sample(spans, shuffle.randint(0, len(spans)))
    markers = start_markers(marked + [s for s in spans if _late(history, s) and s not in marked])
    late = [marker for marker in markers if as_started(marker)]
    pool: list[Span | LogRecord] = [*spans, *markers, *records]
    shuffle.shuffle(pool)
    # A job span's start marker is sent as it starts: one naming a type set late comes before
    # the span's end could settle its attempt (a marker of a settled attempt is dropped).
    pool.sort(key=lambda item: not (isinstance(item, Span) and item in late))
    pool += [shuffle.choice(pool) for _ in range(shuffle.randint(0, 3))]
    delivered: set[bytes] = set()
    ended: set[int] = set()  # attempts whose job span's ended copy came
    start = 0
    while start < len(pool):
        part = pool[start : start + shuffle.randint(1, 6)]
        start += len(part)
        span_part = [item for item in part if isinstance(item, Span)]
        if span_part:
            decoded = decode_protobuf(request_of(span_part).SerializeToString())
            shuffle.choice(receivers).receive(decoded.spans, decoded.wire)
        _deliver_records([item for item in part if isinstance(item, LogRecord)], receivers, shuffle)
        for item in part:
            if isinstance(item, LogRecord):
                delivered.add(item.SerializeToString())
            elif item in spans:
                delivered.add(item.span_id)
                if item.name.startswith("job") and "." not in item.name:
                    ended.add(_attempt(item, attempt_of))
        whole = all(s.span_id in delivered for s in spans if _attempt(s, attempt_of) in ended)
        whole = whole and all(
            r.SerializeToString() in delivered
            for r in records
            if attempt_of.get(int.from_bytes(r.span_id, "big"), 0) in ended
        )
        if whole and shuffle.random() < 0.5:
            receivers[0].settle()
    receivers[0].settle()
    copies = request_of(shuffle.sample(spans, min(3, len(spans))))
    again = decode_protobuf(copies.SerializeToString())
    receivers[1].receive(again.spans, again.wire)  # late copies of settled attempts change nothing


def _late(history: History, span: Span) -> bool:
    """Whether ``span`` is a job span whose type is set late: collect knows its start values
    from a start marker only (OTLP carries the final ones), so it always gets one."""
    return any(
        plan.late_type and span.name == f"job{number}"
        for number, plan in enumerate(history.attempts, 1)
    )


def _deliver_records(
    records: list[LogRecord], receivers: list[Staging], shuffle: random.Random
) -> None:
    """Log records in requests of their own; a copy of a record goes in another request (in
    one request two identical records are two lines)."""
    while records:
        unique = list({record.SerializeToString(): record for record in records}.values())
        for record in unique:
            records.remove(record)
        decoded = decode_logs_protobuf(logs_request_of(unique).SerializeToString())
        shuffle.choice(receivers).receive_logs(decoded.logs, decoded.wire, decoded.keys)


def _collect_matches_the_processor(
    recording: Recording,
    receivers: list[Staging],
    dsn: str,
    second_dsn: str,
    history: History,
    seed: int,
) -> None:
    """Deliver ``history`` to the receivers in the arrival ``seed`` picks; the rows must equal
    the processor's."""
    job_id = f"h-{uuid.uuid4().hex[:12]}"
    deliver(history, recording, receivers, seed, job_id)
    assert table_rows(second_dsn, job_id) == table_rows(dsn, job_id)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=histories, seed=st.integers(0, 2**32 - 1))
def test_any_history_in_any_arrival_gives_the_processors_rows(
    recording: Recording,
    receivers: list[Staging],
    dsn: str,
    second_dsn: str,
    history: History,
    seed: int,
) -> None:
    _collect_matches_the_processor(recording, receivers, dsn, second_dsn, history, seed)


_INSTANT = StepPlan(duration_us=0, pause_us=0)
_NOTHING = AttemptPlan(trace=0, gap_us=1, steps=())


@pytest.mark.parametrize(
    ("history", "seed"),
    [
        pytest.param(
            History((AttemptPlan(0, 1, (StepPlan(0, 0, event=True),)), _NOTHING), 1), 0,
            id="attempt 2 overlaps attempt 1, which settled before attempt 2 arrived",
        ),
        pytest.param(
            History((AttemptPlan(0, 1, (_INSTANT, _INSTANT)),), 1_000_000), 0,
            id="a step lasting no time in the tick its job ends",
        ),
        pytest.param(
            History((_NOTHING, AttemptPlan(0, 1, (_INSTANT, StepPlan(6220, 0, fails=True),
                                                  _INSTANT))), 1_000_000), 0,
            id="a step failing in the tick the next starts and the job ends",
        ),
        pytest.param(
            History((_NOTHING, _NOTHING, AttemptPlan(0, 1, (), names_itself=True)), 1), 0,
            id="a later start abandons no attempt without rows yet",
        ),
        pytest.param(
            History(
                (
                    AttemptPlan(0, 1, (), names_itself=True),
                    AttemptPlan(0, 1, (_INSTANT, StepPlan(0, 0, event=True))),
                    AttemptPlan(0, 1, (_INSTANT, StepPlan(0, 0, event=True)), names_itself=True),
                    AttemptPlan(0, 2, ()),
                ),
                1,
            ),
            241,
            id="an attempt named by an event only is not settled before its job span ends",
        ),
        pytest.param(
            History(
                (
                    AttemptPlan(0, 1, (_INSTANT, StepPlan(0, 0, event=True)), names_itself=True),
                    AttemptPlan(0, 1, (StepPlan(3, 0),)),
                    AttemptPlan(0, 1, (_INSTANT, _INSTANT, StepPlan(0, 0, event=True)),
                                last_step_outlives_job=True),
                    _NOTHING,
                ),
                1,
            ),
            0,
            id="an attempt arriving late abandons a settled one earlier than a later attempt did",
        ),
    ],
)  # fmt: skip
def test_histories_found_by_the_property_test(
    recording: Recording,
    receivers: list[Staging],
    dsn: str,
    second_dsn: str,
    history: History,
    seed: int,
) -> None:
    _collect_matches_the_processor(recording, receivers, dsn, second_dsn, history, seed)
