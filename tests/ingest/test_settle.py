"""Spans whose job span never arrives are kept for the open settle time, then dropped
(counted); late copies of a settled trace are ignored; a whole trace settles after the settle
time, one still waiting for spans does not."""

from __future__ import annotations

import psycopg
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otel_jobsteps.attributes import JOB_EVENT_TYPE, JOB_ID
from otel_jobsteps.ingest.decode import decode_protobuf
from otel_jobsteps.ingest.settings import CollectSettings
from otel_jobsteps.ingest.staging import Staging
from tests.ingest.collector import table_rows
from tests.ingest.requests import request_of
from tests.ingest.stories import Recording, seed_story


def test_orphans_are_dropped_when_settled_and_late_copies_ignored(
    recording: Recording, dsn: str, second_dsn: str
) -> None:
    spans = recording.spans(seed_story, "-orphan")
    keys = [{kv.key for kv in s.attributes} for s in spans]
    steps = [s for s, k in zip(spans, keys, strict=True) if not k & {JOB_ID, JOB_EVENT_TYPE}]
    jobs = [s for s, k in zip(spans, keys, strict=True) if JOB_ID in k and JOB_EVENT_TYPE not in k]
    decoded = decode_protobuf(request_of(steps).SerializeToString())
    staging = Staging(
        CollectSettings(second_dsn, settle_after_s=0.0, settle_open_after_s=0.0, connections=1)
    )
    try:
        assert staging.receive(decoded.spans, decoded.wire).staged == len(steps)
        assert staging.settle() == (2, len(steps))  # two attempts' traces, nothing of them kept
        assert staging.stats.get("orphan_spans") == 1
        with psycopg.connect(second_dsn) as conn:
            assert conn.execute("SELECT count(*) FROM otlp_span").fetchone() == (0,)

        late = decode_protobuf(request_of(steps + jobs).SerializeToString())
        receipt = staging.receive(late.spans, late.wire)
        assert (receipt.staged, receipt.late) == (0, len(steps) + len(jobs))
        assert table_rows(second_dsn, "%-orphan") == ([], [])
        assert staging.settle() == (0, 0)
    finally:
        staging.close()
    assert len(table_rows(dsn, "%-orphan")[0]) == 5  # what the processor recorded meanwhile


def test_a_trace_stops_taking_spans_at_its_limit(recording: Recording, second_dsn: str) -> None:
    spans = recording.spans(seed_story, "-limit")
    by_trace: dict[bytes, list[Span]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    trace = max(by_trace.values(), key=len)  # attempt 1: job span, RENDER, plain, SAVE
    staging = Staging(CollectSettings(second_dsn, max_spans_per_trace=3, connections=1))
    try:
        first = decode_protobuf(request_of(trace[:2]).SerializeToString())
        assert staging.receive(first.spans, first.wire).rejected == 0
        rest = decode_protobuf(request_of(trace[2:]).SerializeToString())
        receipt = staging.receive(rest.spans, rest.wire)
        assert (receipt.staged, receipt.rejected) == (1, len(trace) - 3)
        assert staging.stats.get("spans_over_trace_limit") == 1
    finally:
        staging.close()


def test_a_trace_waiting_for_its_job_span_is_not_settled(
    recording: Recording, dsn: str, second_dsn: str
) -> None:
    # A long step: its steps arrived, the job span ends later than the settle time.
    spans = recording.spans(seed_story, "-long")
    keys = [{kv.key for kv in s.attributes} for s in spans]
    jobs = [s for s, k in zip(spans, keys, strict=True) if JOB_ID in k and JOB_EVENT_TYPE not in k]
    rest = [s for s in spans if s not in jobs]
    waiting = {s.trace_id.hex() for s in jobs}  # each attempt's trace, its steps received
    staging = Staging(CollectSettings(second_dsn, settle_after_s=0.0, connections=1))
    try:
        first = decode_protobuf(request_of(rest).SerializeToString())
        assert staging.receive(first.spans, first.wire).staged == len(rest)
        staging.settle()
        assert _unsettled(second_dsn) == waiting  # quiet, but not whole: kept
        last = decode_protobuf(request_of(jobs).SerializeToString())
        assert staging.receive(last.spans, last.wire).staged == len(jobs)
        assert table_rows(second_dsn, "%-long") == table_rows(dsn, "%-long")
        assert staging.settle() == (len(waiting), 0)  # whole now: settled, nothing dropped
        assert _unsettled(second_dsn) == set()
    finally:
        staging.close()


def _unsettled(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {t for (t,) in conn.execute("SELECT trace_id FROM otlp_trace WHERE NOT settled")}


def test_settling_keeps_up_with_more_traces_than_one_round_takes(
    recording: Recording, second_dsn: str
) -> None:
    spans = recording.spans(seed_story, "-many")
    decoded = decode_protobuf(request_of(spans).SerializeToString())
    staging = Staging(CollectSettings(second_dsn, settle_after_s=0.0, connections=1))
    try:
        staging.receive(decoded.spans, decoded.wire)
        traces = {s.trace_id.hex() for s in spans}
        assert len(traces) > 1
        assert staging.settle(limit=1) == (len(traces), 0)  # one per transaction, all of them
        assert _unsettled(second_dsn) == set()
        with psycopg.connect(second_dsn) as conn:
            assert conn.execute("SELECT count(*) FROM otlp_span").fetchone() == (0,)
    finally:
        staging.close()
