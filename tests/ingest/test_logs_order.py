"""Where a received log record joins its job's span order (pure logic): at its time, but never
before its span's start nor after its span's end; records at one place by time, then tie."""

from __future__ import annotations

from typing import Any

from otel_jobsteps._core.facts import LogFacts, SpanFacts
from otel_jobsteps._ingest.derive import with_logs

TRACE = 7


def _span(span_id: int, parent: int, start: int, end: int) -> SpanFacts:
    return SpanFacts(TRACE, span_id, parent, f"s{span_id}", start, end, {})


def _record(span_id: int, time_ns: int, body: str) -> LogFacts:
    return LogFacts(TRACE, span_id, time_ns, None, 9, None, body, {})


def _names(merged: list[tuple[bool, Any]]) -> list[str]:
    return [
        item.body if isinstance(item, LogFacts) else f"{'start' if is_start else 'end'} {item.name}"
        for is_start, item in merged
    ]


JOB, STEP, NEXT = _span(1, 0, 10, 100), _span(2, 1, 20, 50), _span(3, 1, 50, 90)
ORDER = [(True, JOB), (True, STEP), (False, STEP), (True, NEXT), (False, NEXT), (False, JOB)]


def test_a_record_goes_at_its_time_within_its_span() -> None:
    records = [
        (_record(2, 30, "in step"), (0, b"")),
        (_record(1, 60, "in job, during next"), (0, b"")),
        (_record(3, 70, "in next"), (0, b"")),
    ]
    assert _names(with_logs(ORDER, records)) == [
        "start s1", "start s2", "in step", "end s2", "start s3", "in job, during next",
        "in next", "end s3", "end s1",
    ]  # fmt: skip


def test_a_record_outside_its_spans_times_is_kept_inside_it() -> None:
    records = [
        (_record(2, 5, "before its step started"), (0, b"")),
        (_record(2, 95, "after its step ended"), (0, b"")),
        (_record(9, 30, "span not here"), (0, b"")),
    ]
    assert _names(with_logs(ORDER, records)) == [
        "start s1", "start s2", "before its step started", "after its step ended", "end s2",
        "start s3", "end s3", "end s1",
    ]  # fmt: skip


def test_records_of_one_instant_go_by_their_tie() -> None:
    records = [
        (_record(2, 30, "second"), (1, b"b")),
        (_record(2, 30, "first"), (0, b"z")),
        (_record(2, 29, "earliest"), (5, b"a")),
    ]
    assert _names(with_logs(ORDER, records))[2:5] == ["earliest", "first", "second"]


def test_a_record_of_a_span_still_running_goes_after_its_start() -> None:
    running = [(True, JOB), (True, STEP)]  # start markers only: no ends yet
    merged = with_logs(running, [(_record(2, 500, "late line"), (0, b""))])
    assert _names(merged) == ["start s1", "start s2", "late line"]
