"""Reads of a live SDK span: its event count and newest progress, safely while the job thread
appends; and the fast paths into the SDK's span state, not only their fallbacks."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider

from otel_jobsteps._core.events import plain_attributes
from otel_jobsteps._live.spans import (
    SPAN_ID,
    TRACE_ID,
    attribute_dict,
    events_added,
    newest_progress_event,
    span_state,
)


def new_span(**attributes: Any) -> Any:
    return TracerProvider().get_tracer("t").start_span("s", attributes=attributes)


def test_the_event_count_moves_with_every_event_even_when_the_list_is_full() -> None:
    span: Any = TracerProvider(span_limits=SpanLimits(max_events=2)).get_tracer("t").start_span("s")
    counts = [events_added(span)]
    for pct in range(4):
        span.add_event("progress", {"pct": pct})
        counts.append(events_added(span))
    assert counts == [0, 1, 2, 3, 4]  # the list holds two; the count still grows
    assert len(span.events) == 2


def test_the_event_count_falls_back_to_the_public_events() -> None:
    public = SimpleNamespace(events=(object(), object()), dropped_events=3)
    assert events_added(public) == 5  # type: ignore[arg-type]


def test_the_newest_progress_skips_exceptions() -> None:
    span = new_span(**{"job.step.key": "A"})
    assert newest_progress_event(span) is None
    span.add_event("progress", {"pct": 1})
    span.add_event("progress", {"pct": 2})
    span.record_exception(ValueError("not progress"))
    event = newest_progress_event(span)
    assert event is not None
    assert dict(event.attributes or {}) == {"pct": 2}


@pytest.fixture
def frequent_thread_switches() -> Iterator[None]:
    """Threads switch every microsecond instead of every 5 ms: races show within a second."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("frequent_thread_switches")
def test_the_latest_progress_is_read_safely_while_the_job_thread_appends() -> None:
    """A job thread adds events as fast as it can (each progress followed by exceptions the
    reader scans past, in a list that drops its oldest) while the writer reads: no read fails
    ("deque mutated during iteration"), and none goes back in time."""
    tracer = TracerProvider(span_limits=SpanLimits(max_events=64)).get_tracer("t")
    span: Any = tracer.start_span("s")
    span.add_event("progress", {"n": 0})
    stop = threading.Event()

    def take_latest() -> Any:
        event = newest_progress_event(span)
        assert event is not None
        return event.attributes

    def job() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            span.add_event("progress", {"n": n})
            for _ in range(20):
                span.add_event("exception", {"exception.type": "E"})

    appender = threading.Thread(target=job)
    appender.start()
    seen: list[int] = []
    failures: list[BaseException] = []
    try:
        for _ in range(20_000):
            try:
                seen.append(take_latest()["n"])
            except RuntimeError as error:
                failures.append(error)
    finally:
        stop.set()
        appender.join(10)
    assert failures == []
    assert seen == sorted(seen)
    assert seen[-1] > 0  # the job thread did append meanwhile


def test_attribute_dict_reads_the_sdk_dict_itself() -> None:
    span = new_span(**{"job.id": "7"})
    assert attribute_dict(span) == {"job.id": "7"}
    assert attribute_dict(span) is span._attributes._dict  # the fast path, no copy


def test_attribute_dict_falls_back_to_the_public_attributes() -> None:
    public = {"job.id": "8"}
    assert attribute_dict(SimpleNamespace(attributes=public)) is public  # type: ignore[arg-type]
    assert attribute_dict(SimpleNamespace(attributes=None)) == {}  # type: ignore[arg-type]


def test_plain_attributes_unwraps_bounded_attributes_and_passes_others() -> None:
    bounded = BoundedAttributes(attributes={"a": 1})
    assert plain_attributes(bounded) is bounded._dict
    mapping = {"b": 2}
    assert plain_attributes(mapping) is mapping
    assert plain_attributes(None) == {}


def test_span_state_is_the_sdk_spans_own_dict_live_or_ended() -> None:
    span = new_span(a=1)
    assert span_state(span) is vars(span)
    span.end()
    ended: Any = span._readable_span()  # what on_end is handed
    assert span_state(ended) is vars(ended)
    assert span_state(ended)["_name"] == "s"
    assert span_state(ended)["_end_time"] == span.end_time


def test_span_state_reads_the_properties_of_a_class_that_computes_one() -> None:
    class Renamed(ReadableSpan):
        @property
        def name(self) -> str:
            return "renamed"

    state = span_state(Renamed("s", context=new_span().get_span_context()))
    assert state["_name"] == "renamed"
    assert state["_context"] is not None


def test_a_span_context_is_read_by_index_as_its_ids() -> None:
    context = new_span().get_span_context()
    assert (context[TRACE_ID], context[SPAN_ID]) == (context.trace_id, context.span_id)
