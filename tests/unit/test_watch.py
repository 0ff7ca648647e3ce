"""The watch reads a running step's progress again until it is taken, and a step's close takes
the newest progress when what was passed on while it ran is older (a poll shed in a backlog)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID, JOB_STEP_KEY, JOB_TYPE
from otel_jobsteps._core.commands import ProgressReported, StepEnded
from otel_jobsteps._core.facts import SpanEvent, SpanFacts
from otel_jobsteps._core.translate import SpanTranslator
from otel_jobsteps._live.watch import SpanEnded, SpanStarted, SpanWatch, ended_fields


class _Reader:
    """Takes progress only while ``taking``; remembers what it was offered."""

    def __init__(self) -> None:
        self.taking = True
        self.offered: list[Mapping[str, Any]] = []

    def started(self, fields: tuple[Any, ...], ended: bool, whole: bool) -> None:
        pass

    def ended(self, fields: tuple[Any, ...]) -> None:
        pass

    def log(self, record: Any) -> None:
        pass

    def progress(
        self, trace_id: int, span_id: int, attributes: Mapping[str, Any], time_ns: int = 0
    ) -> bool:
        self.offered.append(dict(attributes))
        return self.taking


def test_progress_not_taken_is_offered_again_and_none_while_backlogged() -> None:
    problems: list[str] = []
    reader = _Reader()
    watch = SpanWatch(
        reader,
        poll_interval_s=0.05,
        clock=time.monotonic,
        problem=lambda kind, error: problems.append(kind),
        max_steps=10,
    )
    span = TracerProvider().get_tracer("t").start_span("s", attributes={JOB_STEP_KEY: "S"})
    watch.handle(SpanStarted(span))  # type: ignore[arg-type]  # a live SDK span
    span.add_event("progress", {"pct": 10})

    reader.taking = False
    watch.poll_all()
    reader.taking = True
    watch.poll_all()
    watch.poll_all()  # taken: nothing new to offer
    assert reader.offered == [{"pct": 10}, {"pct": 10}]

    span.add_event("progress", {"pct": 90})
    watch.backlogged = lambda: True
    watch.poll_all()
    assert reader.offered == [{"pct": 10}, {"pct": 10}]
    assert problems == ["dropped_ProgressReported"]
    watch.backlogged = lambda: False
    watch.poll_all()
    assert reader.offered[-1] == {"pct": 90}


def _facts(span_id: int, parent: int, attributes: dict[str, Any], **more: Any) -> SpanFacts:
    return SpanFacts(1, span_id, parent, "span", 100, more.pop("end_ns", 0), attributes, **more)


def test_the_close_takes_newer_progress_than_was_passed_on() -> None:
    translator = SpanTranslator(problem=lambda kind, error: None, received=False)
    job = {JOB_DOMAIN: "d", JOB_ID: "j", JOB_TYPE: "t", JOB_ATTEMPT: 1}
    translator.started(_facts(10, 0, job))
    step = {JOB_STEP_KEY: "S"}
    translator.started(_facts(11, 10, step))
    assert translator.progress(11, {"pct": 10}) is not None  # passed on while it ran
    events = [SpanEvent("progress", 150, {"pct": 10}), SpanEvent("progress", 160, {"pct": 90})]

    closed = translator.ended(_facts(11, 10, step, end_ns=200, events=events))

    assert [type(command) for command in closed] == [ProgressReported, StepEnded]
    assert closed[0].attributes == {"pct": 90}  # type: ignore[union-attr]


def test_the_close_adds_nothing_when_the_newest_was_passed_on() -> None:
    translator = SpanTranslator(problem=lambda kind, error: None, received=False)
    translator.started(_facts(10, 0, {JOB_DOMAIN: "d", JOB_ID: "j", JOB_TYPE: "t", JOB_ATTEMPT: 1}))
    translator.started(_facts(11, 10, {JOB_STEP_KEY: "S"}))
    translator.progress(11, {"pct": 90})
    events = [SpanEvent("progress", 160, {"pct": 90})]

    closed = translator.ended(_facts(11, 10, {JOB_STEP_KEY: "S"}, end_ns=200, events=events))

    assert [type(command) for command in closed] == [StepEnded]


def _watch_of(reader: _Reader, *, max_steps: int, budget: int, now: list[float]) -> SpanWatch:
    return SpanWatch(
        reader,
        poll_interval_s=0.05,
        clock=lambda: now[0],
        problem=lambda kind, error: None,
        max_steps=max_steps,
        poll_budget=budget,
    )


def test_a_poll_looks_at_its_budget_of_steps_in_turn_and_a_flush_at_all() -> None:
    """The cost of a poll is flat in the steps running (issue 22): each due poll reads the next
    ``budget`` steps, round the ring, ended steps leave it, and a flush reads them all."""
    now = [0.0]
    reader = _Reader()
    watch = _watch_of(reader, max_steps=100, budget=3, now=now)
    tracer = TracerProvider().get_tracer("t")
    spans = [tracer.start_span(f"s{n}", attributes={JOB_STEP_KEY: "S"}) for n in range(10)]
    for span in spans:
        watch.handle(SpanStarted(span))  # type: ignore[arg-type]  # a live SDK span
    for number, span in enumerate(spans):
        span.add_event("progress", {"n": number})
    spans[1].end()
    watch.handle(SpanEnded(ended_fields(spans[1])))  # ended: polls skip it from now on

    watch.poll_due(now[0])  # not due yet
    for _ in range(3):
        now[0] += 0.05
        watch.poll_due(now[0])
    assert reader.offered == [{"n": n} for n in (0, 2, 3, 4, 5, 6, 7, 8)]  # 9 visits, one ended
    now[0] += 0.05
    watch.poll_due(now[0])
    assert reader.offered[-1] == {"n": 9}

    for span in spans:
        span.add_event("progress", {"again": True})
    watch.poll_all()
    assert reader.offered[9:] == [{"again": True}] * 9


def test_running_steps_past_the_bound_forget_the_oldest() -> None:
    now = [0.0]
    reader = _Reader()
    watch = _watch_of(reader, max_steps=4, budget=100, now=now)
    tracer = TracerProvider().get_tracer("t")
    spans = [tracer.start_span(f"s{n}", attributes={JOB_STEP_KEY: "S"}) for n in range(1000)]
    for number, span in enumerate(spans):
        watch.handle(SpanStarted(span))  # type: ignore[arg-type]  # a live SDK span
        span.add_event("progress", {"n": number})
    watch.poll_all()
    assert reader.offered == [{"n": n} for n in range(996, 1000)]
    assert len(watch._rotation) <= 2 * 4 + 100  # ids of forgotten steps do not pile up


def test_a_flush_polls_each_running_step_once_beside_steps_ended_since() -> None:
    reader = _Reader()
    watch = SpanWatch(
        reader, poll_interval_s=0.05, clock=time.monotonic, problem=lambda k, e: None, max_steps=10
    )
    tracer = TracerProvider().get_tracer("t")
    running = []
    for number in range(30):
        span = tracer.start_span(f"s{number}", attributes={JOB_STEP_KEY: "S"})
        watch.handle(SpanStarted(span))  # type: ignore[arg-type]  # a live SDK span
        if number % 6:
            span.end()
            watch.handle(SpanEnded(ended_fields(span)))
        else:
            running.append(span)
    for number, span in enumerate(running):
        span.add_event("progress", {"n": number})
    watch.poll_all()
    assert reader.offered == [{"n": number} for number in range(len(running))]
