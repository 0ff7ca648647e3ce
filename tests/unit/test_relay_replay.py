"""What the relay tells a writer process that replaces a dead one (issue 22): the spans started
and not ended in a frame sent, in start order, bounded; never an ordinary event (whole at its
start: telling it again would record it twice)."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JOB_EVENT_TYPE, JOB_STEP_KEY
from otel_jobsteps._live.fields import span_fields
from otel_jobsteps._live.watch import ended_fields
from otel_jobsteps._live.writer_process.outbox import Outbox
from otel_jobsteps._live.writer_process.wire import (
    ENDED,
    FLUSH,
    PROGRESS,
    REPLAYED,
    RESOURCE,
    STARTED,
    WHOLE,
)


def _told(messages: list[Any]) -> list[tuple[str, str]]:
    """The spans told (fields[3]: the span's name); a resource as its number."""
    return [(kind, str(fields) if kind == RESOURCE else fields[3]) for kind, fields, *_ in messages]


def test_open_spans_are_replayed_until_their_end_is_sent_and_the_oldest_go_past_the_bound() -> None:
    tracer = TracerProvider().get_tracer("t")
    outbox = Outbox(max_open=3)
    job = tracer.start_span("job")
    event = tracer.start_span("event", attributes={JOB_EVENT_TYPE: "STALLED"})
    fetch = tracer.start_span("FETCH", attributes={JOB_STEP_KEY: "FETCH"})
    for span in (job, event, fetch):
        outbox.started(span_fields(span, ended=False), False, False)
    outbox.take()
    fetch.end()
    outbox.ended(ended_fields(fetch))

    outbox.replay()  # FETCH's end is not sent yet: the new writer process must know FETCH
    assert _told(outbox.messages) == [
        (RESOURCE, "0"),  # told first: an ended span names its resource by number
        (REPLAYED, "job"),
        (REPLAYED, "FETCH"),
        (RESOURCE, "0"),
        (ENDED, "FETCH"),
    ]
    outbox.take()
    outbox.replay()
    assert _told(outbox.take()) == [(RESOURCE, "0"), (REPLAYED, "job")]

    for name in ("A", "B", "C"):
        outbox.started(span_fields(tracer.start_span(name), ended=False), False, False)
    outbox.take()
    outbox.replay()
    assert _told(outbox.take()) == [
        (RESOURCE, "0"),
        (REPLAYED, "A"),
        (REPLAYED, "B"),
        (REPLAYED, "C"),
    ]  # job: the oldest out


def test_a_start_read_after_its_end_travels_with_that_end_when_it_comes_next() -> None:
    """One WHOLE message for the two facts (the writer process tells it both); anything else
    between them sends the start alone first, in its place."""
    tracer = TracerProvider().get_tracer("t")
    outbox = Outbox(max_open=3)
    first, second = tracer.start_span("A"), tracer.start_span("B")
    first.end()
    second.end()
    outbox.started(span_fields(first, ended=False), True, True)
    outbox.ended(ended_fields(first))
    outbox.started(span_fields(second, ended=False), True, True)
    outbox.progress(0, 1, {}, 0)
    outbox.ended(ended_fields(second))
    assert [m[0] for m in outbox.take()] == [RESOURCE, WHOLE, STARTED, PROGRESS, ENDED]
    outbox.started(span_fields(first, ended=False), True, True)
    assert [m[0] for m in outbox.take()] == [STARTED]  # a frame never holds a start back


def test_a_flush_asked_after_a_held_start_follows_that_start() -> None:
    """A flush read between a start (read after its end) and that end: the start is sent
    first, so the writer process has it before it flushes."""
    tracer = TracerProvider().get_tracer("t")
    outbox = Outbox(max_open=3)
    span = tracer.start_span("A")
    span.end()
    outbox.started(span_fields(span, ended=False), True, True)
    outbox.flush(7)
    outbox.ended(ended_fields(span))
    assert [m[0] for m in outbox.take()] == [STARTED, FLUSH, RESOURCE, ENDED]
