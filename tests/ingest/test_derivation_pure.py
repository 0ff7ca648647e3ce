"""The derivation without a database: spans of jobs -> the batch, the attempts derived, which
of them wait for a span, and the later attempts' starts that abandon settled ones."""

from __future__ import annotations

from typing import Any

from otel_jobsteps._core.batch import Batch
from otel_jobsteps._core.facts import LogFacts, SpanFacts
from otel_jobsteps._ingest.derive import JobSpan, derive_jobs, settled_start
from otel_jobsteps._ingest.place import JOB, PLAIN

TRACE = 0xABC
TRACE_HEX = format(TRACE, "032x")


def job(span_id: int, start: int, end: int, attempt: int, **more: Any) -> SpanFacts:
    names = {"job.domain": "d", "job.id": "1", "job.type": "t", "job.attempt": attempt, **more}
    return SpanFacts(TRACE, span_id, 0, "job", start, end, names)


def step(span_id: int, parent: int, start: int, end: int, key: str) -> SpanFacts:
    return SpanFacts(TRACE, span_id, parent, key, start, end, {"job.step.key": key})


def staged(facts: SpanFacts, kind: int, attempt: int) -> JobSpan:
    return JobSpan(TRACE_HEX, facts.span_id, bool(facts.end_ns), facts, kind, ("d", "1", attempt))


def rows(batch: Batch | None) -> list[tuple[int, str, str | None, str | None]]:
    """(attempt, type, step key, status) of every row the batch inserts."""
    assert batch is not None
    found = []
    for segment in batch.segments:
        found += [(r.attempt, r.type, r.step_key, r.step_status) for r in segment.rows]
    return found


def final_rows(batch: Batch | None) -> list[tuple[int, str, str | None]]:
    assert batch is not None
    return [(r.attempt, r.status, r.reason) for s in batch.segments for r in s.job_logs]


def test_one_attempt_is_derived_and_noted() -> None:
    spans = [
        staged(job(1, 10_000, 40_000, 1), JOB, 1),
        staged(step(2, 1, 20_000, 30_000, "A"), PLAIN, 1),
    ]
    found = derive_jobs([("d", "1")], spans, attempts=[], problem=print)
    assert found.derived == [("d", "1", 1)]
    assert found.pending == set()
    assert found.firsts == {("d", "1", 1): (TRACE_HEX, 1, 10_000)}
    assert found.starts == []
    assert (1, "STEP", "A", "COMPLETED") in rows(found.batch)
    assert final_rows(found.batch) == [(1, "COMPLETED", None)]


def test_an_open_marker_keeps_its_attempt_pending() -> None:
    marker = job(1, 10_000, 0, 1)
    found = derive_jobs([("d", "1")], [staged(marker, JOB, 1)], attempts=[], problem=print)
    assert found.derived == [("d", "1", 1)]
    assert found.pending == {("d", "1", 1)}


def test_a_later_attempt_abandons_the_open_one_and_is_noted_as_a_start() -> None:
    spans = [
        staged(job(1, 10_000, 0, 1), JOB, 1),  # attempt 1 still running (a marker)
        staged(step(2, 1, 11_000, 0, "A"), PLAIN, 1),
        staged(job(3, 20_000, 30_000, 2), JOB, 2),
    ]
    found = derive_jobs([("d", "1")], spans, attempts=[], problem=print)
    assert found.derived == [("d", "1", 1), ("d", "1", 2)]
    assert found.starts == [("d", "1", 2, 20_000)]
    assert ("d", "1", 1) in found.pending
    assert found.batch is not None
    abandons = [op.attempt for s in found.batch.segments for op in s.abandons]
    assert abandons == [2]  # attempt 2's start abandons what earlier attempts left open
    assert final_rows(found.batch) == [(2, "COMPLETED", None)]


def test_a_settled_attempt_takes_part_by_its_start_only() -> None:
    start = settled_start(("d", "1", 1), TRACE_HEX, 1, 10_000)
    spans = [staged(job(3, 20_000, 30_000, 2), JOB, 2)]
    found = derive_jobs([("d", "1")], spans, attempts=[], started=[start], problem=print)
    assert found.derived == [("d", "1", 2)]  # the settled attempt's rows stay as they are
    assert found.starts == [("d", "1", 2, 20_000)]


def test_log_records_join_their_step() -> None:
    spans = [
        staged(job(1, 10_000, 40_000, 1), JOB, 1),
        staged(step(2, 1, 20_000, 30_000, "A"), PLAIN, 1),
    ]
    line = LogFacts(TRACE, 2, 25_000, None, 9, "INFO", "hello", {})
    found = derive_jobs(
        [("d", "1")], spans, attempts=[], logs={("d", "1"): [(line, (0, b"k"))]}, problem=print
    )
    assert (1, "LOG", "A", None) in rows(found.batch)


def test_a_job_that_fails_to_derive_is_left_out() -> None:
    problems: list[str] = []
    bad = SpanFacts(TRACE, 1, 0, "job", 10_000, 20_000, {"job.domain": "d", "job.id": "1"})
    spans = [JobSpan(TRACE_HEX, 1, True, bad, JOB, ("d", "1", 1))]
    broken = {("d", "1"): [(None, (0, b""))]}  # not a record: the derivation raises
    found = derive_jobs(
        [("d", "1")],
        spans,
        attempts=[("d", "1", 1)],
        logs=broken,  # type: ignore[dict-item]
        problem=lambda kind, detail: problems.append(kind),
    )
    assert found.failed == {("d", "1")}
    assert found.derived == []
    assert "derive_failed" in problems
