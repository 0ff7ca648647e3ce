"""What the writer's queue keeps of a span once it has ended (issue 22 defect 5): none of the
SDK's objects, and a few objects the garbage collector tracks, so spans waiting for the writer
are not promoted and walked by full collections beside many open spans."""

from __future__ import annotations

import gc
import weakref
from typing import Any

from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.trace import set_span_in_context

from otel_jobsteps import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_ID,
    JOB_STEP_KEY,
    JOB_TYPE,
    JobStepsProcessor,
    job_attempt,
    step,
)
from otel_jobsteps._core.vocabulary import LOG, STEP
from otel_jobsteps._live.watch import LogEmitted
from otel_jobsteps.testing import InMemoryStore
from tests.unit.recorder_support import written
from tests.unit.writer_support import HeldSide

# Tracked objects per queued span: its start, its end, the fields, their events and one event.
TRACKED_PER_ENDED_SPAN = 5


def _queued_job(steps: int) -> tuple[HeldSide, list[Any], list[weakref.ref[Any]]]:
    """A job of ``steps`` steps with a progress event each, ended, its items queued unread."""
    side = HeldSide()
    processor = JobStepsProcessor(writer_side=side)
    queued = side.held
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    attributes = {JOB_DOMAIN: "d", JOB_ID: "1", JOB_TYPE: "t", JOB_ATTEMPT: 1}
    job = tracer.start_span("job", attributes=attributes)
    spans = [job]
    parent = set_span_in_context(job)
    for number in range(steps):
        span = tracer.start_span(f"s{number}", context=parent, attributes={JOB_STEP_KEY: "S"})
        span.add_event("progress", {"done": number})
        span.end()
        spans.append(span)
    job.end()
    refs = [weakref.ref(span) for span in spans]
    return side, queued, refs


def _reachable(roots: list[Any]) -> list[Any]:
    """Every object reachable from ``roots`` but classes (shared by every instance), once each."""
    seen: dict[int, Any] = {}
    pending = list(roots)
    while pending:
        item = pending.pop()
        if id(item) in seen or isinstance(item, type):
            continue
        seen[id(item)] = item
        pending.extend(gc.get_referents(item))
    return list(seen.values())


def test_the_queue_keeps_no_sdk_object_of_an_ended_span() -> None:
    side, queued, refs = _queued_job(steps=2)
    gc.collect()
    assert queued  # the items are kept, the spans are gone
    assert all(ref() is None for ref in refs)
    sdk = [o for o in _reachable(queued) if isinstance(o, ReadableSpan | Event)]
    assert sdk == []
    ops = written(side.read_by_hand())  # and the items still say everything: rows complete
    steps = [(op.step_status, op.detail) for name, op in ops if name == "insert_events"]
    assert steps == [("COMPLETED", {"done": 0}), ("COMPLETED", {"done": 1})]
    assert [op.status for name, op in ops if name == "insert_job_logs"] == ["COMPLETED"]


def test_an_ended_span_costs_the_collector_a_few_tracked_objects_while_queued() -> None:
    _, queued, _ = _queued_job(steps=2)
    gc.collect()
    tracked = [o for o in _reachable(queued) if gc.is_tracked(o)]
    # Before issue 22 defect 5 the queue held each SDK span whole: about 19 tracked objects.
    assert len(tracked) <= TRACKED_PER_ENDED_SPAN * 3, [type(o).__name__ for o in tracked]


def test_a_running_span_stays_in_its_queued_start_for_the_writer_to_poll() -> None:
    side = HeldSide()
    processor = JobStepsProcessor(writer_side=side)
    queued = side.held
    provider = TracerProvider()
    provider.add_span_processor(processor)
    attributes = {JOB_DOMAIN: "d", JOB_ID: "1", JOB_TYPE: "t", JOB_ATTEMPT: 1}
    job = provider.get_tracer("test").start_span("job", attributes=attributes)
    assert queued[0].span is job
    job.end()
    assert queued[0].span is None
    assert queued[0].fields == queued[1].fields


def test_with_log_records_the_span_items_keep_no_sdk_object_and_the_rows_are_complete() -> None:
    """Both branches at once: a step's log line is queued as the SDK's record (as the batch log
    processor queues it; its context reaches the span until the writer reads it), its span's
    start and end as fields; read in queue order they give the STEP and LOG rows."""
    store = InMemoryStore()
    side = HeldSide(store)  # held unread until the span items are looked at
    processor = JobStepsProcessor(writer_side=side)
    queued = side.held
    tracers, logs = TracerProvider(), LoggerProvider()
    tracers.add_span_processor(processor)
    logs.add_log_record_processor(processor)
    tracer, logger = tracers.get_tracer("test"), logs.get_logger("test")
    try:
        with job_attempt("render", "42", "t", tracer=tracer):
            for key in ("A", "B"):
                with step(key, tracer=tracer):
                    logger.emit(body=f"in {key}", severity_number=SeverityNumber.INFO)
        kinds = [type(item).__name__ for item in queued]
        assert kinds.count("LogEmitted") == 2
        spans = [item for item in queued if not isinstance(item, LogEmitted)]
        assert [o for o in _reachable(spans) if isinstance(o, ReadableSpan | Event)] == []
        side.release()
        assert processor.force_flush(5_000)
        found = [(row.type, row.step_key, row.message) for row in store.events()]
        assert found == [
            (STEP, "A", None),
            (LOG, "A", "in A"),
            (STEP, "B", None),
            (LOG, "B", "in B"),
        ]
    finally:
        logs.shutdown()
        tracers.shutdown()
