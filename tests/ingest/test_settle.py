"""Settling is per attempt: one with its final row and nothing open settles after the settle
time, and a later copy or child of it is dropped (counted); a new attempt is new work whenever it
comes; spans whose job span never arrives are kept for the open settle time, then dropped."""

from __future__ import annotations

import psycopg
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.trace import Tracer

from otel_jobsteps import job_attempt, record_job_event, step
from otel_jobsteps._ingest.decode import decode_protobuf
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Receipt, Staging
from otel_jobsteps.attributes import JOB_EVENT_TYPE, JOB_ID
from tests.ingest.collector import table_rows
from tests.ingest.requests import request_of, start_markers
from tests.ingest.stories import Recording, seed_story


def _split(spans: list[Span]) -> tuple[list[Span], list[Span]]:
    """(the job spans, the rest)."""
    keys = [{kv.key for kv in s.attributes} for s in spans]
    jobs = [s for s, k in zip(spans, keys, strict=True) if JOB_ID in k and JOB_EVENT_TYPE not in k]
    return jobs, [s for s in spans if s not in jobs]


def _receive(staging: Staging, spans: list[Span]) -> Receipt:
    decoded = decode_protobuf(request_of(spans).SerializeToString())
    return staging.receive(decoded.spans, decoded.wire)


def test_orphans_are_dropped_and_a_settled_attempts_copies_are_late(
    recording: Recording, dsn: str, second_dsn: str
) -> None:
    spans = recording.spans(seed_story, "-orphan")
    steps = [s for s in _split(spans)[1] if not {kv.key for kv in s.attributes} & {JOB_EVENT_TYPE}]
    staging = Staging(
        CollectSettings(second_dsn, settle_after_s=0.0, settle_open_after_s=0.0, connections=1)
    )
    try:
        assert _receive(staging, steps).staged == len(steps)
        assert staging.settle() == (0, len(steps))  # no job span in time: dropped
        assert staging.stats.get("orphan_spans") == 1
        with psycopg.connect(second_dsn) as conn:
            assert conn.execute("SELECT count(*) FROM otlp_span").fetchone() == (0,)

        # The job spans come after all: new attempts, new work, with every span again.
        assert _receive(staging, spans).staged == len(spans)
        assert table_rows(second_dsn, "%-orphan") == table_rows(dsn, "%-orphan")
        assert staging.settle() == (2, 0)
        # Settled: every copy is late, and changes nothing.
        assert _receive(staging, spans) == Receipt(0, 0, len(spans), 0)
        assert table_rows(second_dsn, "%-orphan") == table_rows(dsn, "%-orphan")
        assert staging.settle() == (0, 0)
    finally:
        staging.close()


def test_a_trace_at_its_limit_keeps_its_earliest_spans(
    recording: Recording, second_dsn: str
) -> None:
    spans = recording.spans(seed_story, "-limit")
    by_trace: dict[bytes, list[Span]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    trace = max(by_trace.values(), key=len)  # attempt 1: job span, RENDER, plain, SAVE
    staging = Staging(CollectSettings(second_dsn, max_spans_per_trace=3, connections=1))
    try:
        assert _receive(staging, trace[:1]).rejected == 0
        receipt = _receive(staging, list(reversed(trace[1:])))
        assert (receipt.staged, receipt.rejected) == (2, len(trace) - 3)
        assert staging.stats.get("spans_over_trace_limit") == 1
        with psycopg.connect(second_dsn) as conn:
            kept = {bytes.fromhex(format(i & (2**64 - 1), "016x"))
                    for (i,) in conn.execute("SELECT span_id FROM otlp_span")}  # fmt: skip
        by_start = sorted(trace[1:], key=lambda s: s.start_time_unix_nano)
        assert kept == {s.span_id for s in [trace[0], *by_start[:2]]}  # not by span id
    finally:
        staging.close()


def test_an_event_naming_its_job_before_the_job_span_is_written_once(
    recording: Recording, dsn: str, second_dsn: str
) -> None:
    def story(tracer: Tracer, _: str) -> None:
        with job_attempt("mail", "once-1", "digest", tracer=tracer), step("SEND", tracer=tracer):
            # An event inside the job that names its job itself, too.
            record_job_event("mail", "once-1", "LOG", "inside", tracer=tracer)

    spans = recording.spans(story, "")
    events = [s for s in spans if any(kv.key == JOB_EVENT_TYPE for kv in s.attributes)]
    staging = Staging(CollectSettings(second_dsn, connections=1))
    try:
        assert _receive(staging, events).staged == 1  # placed by what it names
        _receive(staging, [s for s in spans if s not in events])  # then in its parent's job
        _receive(staging, events)
        assert table_rows(second_dsn, "once-1") == table_rows(dsn, "once-1")
        assert len(table_rows(dsn, "once-1")[0]) == 2  # the step and the event, once
    finally:
        staging.close()


def test_an_attempt_waiting_for_spans_is_not_settled(
    recording: Recording, dsn: str, second_dsn: str
) -> None:
    # Long steps: their steps arrived, their job spans end later than the settle time.
    spans = recording.spans(seed_story, "-long")
    jobs, rest = _split(spans)
    staging = Staging(CollectSettings(second_dsn, settle_after_s=0.0, connections=1))
    try:
        assert _receive(staging, rest).staged == len(rest)
        assert staging.settle() == (0, 0)  # no job span yet: kept, nothing placed
        markers = start_markers(jobs[:1])  # attempt 1 running: its marker, no end yet
        assert _receive(staging, markers).staged == 1
        assert staging.settle() == (0, 0)  # attempt 1 is open: kept
        assert _unsettled(second_dsn) == {1}
        assert _receive(staging, jobs).staged == len(jobs)
        assert table_rows(second_dsn, "%-long") == table_rows(dsn, "%-long")
        assert staging.settle() == (2, 0)  # both final, nothing open: settled
        assert _unsettled(second_dsn) == set()
    finally:
        staging.close()


def _unsettled(dsn: str) -> set[int]:
    with psycopg.connect(dsn) as conn:
        return {a for (a,) in conn.execute("SELECT attempt FROM otlp_attempt WHERE NOT settled")}


def test_settling_keeps_up_with_more_attempts_than_one_round_takes(
    recording: Recording, second_dsn: str
) -> None:
    spans = recording.spans(seed_story, "-many")
    staging = Staging(CollectSettings(second_dsn, settle_after_s=0.0, connections=1))
    try:
        _receive(staging, spans)
        assert staging.settle(limit=1) == (2, 0)  # one per transaction, all of them
        assert _unsettled(second_dsn) == set()
        with psycopg.connect(second_dsn) as conn:
            assert conn.execute(
                "SELECT count(*) FROM otlp_span WHERE body IS NOT NULL"
            ).fetchone() == (0,)
    finally:
        staging.close()
