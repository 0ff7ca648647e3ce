"""Spans whose job span never arrives are kept for the settle time, then dropped (counted);
late copies of a settled trace are ignored."""

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
    staging = Staging(CollectSettings(second_dsn, settle_after_s=0.0, connections=1))
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
