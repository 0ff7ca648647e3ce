"""The one translation: span facts -> commands, the same for live and received spans."""

from __future__ import annotations

from typing import Any

import pytest

from otel_jobsteps import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_ERROR,
    JOB_EVENT_TYPE,
    JOB_ID,
    JOB_STEP_DETAIL,
    JOB_STEP_KEY,
    JOB_TYPE,
)
from otel_jobsteps._core.batch import EventRow
from otel_jobsteps._core.commands import (
    Command,
    EventRecorded,
    JobEnded,
    JobStarted,
    StepEnded,
    StepStarted,
)
from otel_jobsteps._core.facts import SpanEvent, SpanFacts
from otel_jobsteps._core.recorder import StepRecorder
from otel_jobsteps._core.translate import SpanTranslator
from tests.unit.recorder_support import MS, settle, written

TRACE = 0xABC
JOB = {JOB_DOMAIN: "render", JOB_ID: "42", JOB_TYPE: "thumbnail", JOB_ATTEMPT: 1}


def span(
    span_id: int,
    parent: int,
    start_ms: int,
    end_ms: int,
    attributes: dict[str, Any],
    events: tuple[SpanEvent, ...] = (),
    *,
    error: bool = False,
) -> SpanFacts:
    return SpanFacts(
        TRACE, span_id, parent, f"span-{span_id}", start_ms * MS, end_ms * MS, attributes, events,
        error, "boom" if error else None,
    )  # fmt: skip


def progress(at_ms: int, **detail: Any) -> SpanEvent:
    return SpanEvent("progress", at_ms * MS, detail)


# The seed story's first attempt: RENDER with progress completes, SAVE fails with an exception.
JOB_SPAN = span(1, 0, 0, 100, JOB, error=True)
RENDER = span(2, 1, 10, 40, {JOB_STEP_KEY: "RENDER"}, (progress(20, pct=50), progress(30, pct=99)))
SAVE = span(
    3, 1, 50, 90, {JOB_STEP_KEY: "SAVE"},
    (SpanEvent("exception", 89 * MS, {"exception.type": "IOError", "exception.message": "disk"}),),
    error=True,
)  # fmt: skip
PLAIN = span(4, 3, 60, 70, {"db.system": "postgresql"})


def rows(feed: list[Command]) -> list[EventRow]:
    recorder = StepRecorder(debounce_ms=0)
    for command in feed:
        recorder.handle(command)
    return settle(written(recorder.take_batch()))


def live_order(translator: SpanTranslator) -> list[Command]:
    """As the processor sees them: each start when it happens, each end with its final facts."""
    commands: list[Command] = []
    for facts, ended in (
        (JOB_SPAN, False), (RENDER, False), (RENDER, True), (SAVE, False), (PLAIN, False),
        (PLAIN, True), (SAVE, True), (JOB_SPAN, True),
    ):  # fmt: skip
        if ended:
            commands += translator.ended(facts)
        else:
            commands += translator.started(SpanFacts(**{**_fields(facts), "end_ns": 0}))
    return commands


def _fields(facts: SpanFacts) -> dict[str, Any]:
    return {name: getattr(facts, name) for name in SpanFacts.__slots__}


def test_received_whole_spans_give_the_rows_of_live_ones() -> None:
    live = rows(live_order(SpanTranslator(problem=_no_problem, received=False)))
    received = SpanTranslator(problem=_no_problem)
    commands = received.started(JOB_SPAN)
    for facts in (RENDER, PLAIN, SAVE, JOB_SPAN):  # ended spans only, the job's start first
        commands += received.ended(facts)
    assert rows(commands) == live
    assert [(r.step_key, r.step_status, r.detail, r.message) for r in live] == [
        ("RENDER", "COMPLETED", {"pct": 99}, None),
        ("SAVE", "FAILED", None, "IOError: disk"),
    ]


def test_a_start_marker_then_the_whole_span_opens_once() -> None:
    translator = SpanTranslator(problem=_no_problem)
    marker = SpanFacts(**{**_fields(RENDER), "end_ns": 0})
    assert [type(c) for c in translator.started(JOB_SPAN)] == [JobStarted]
    assert [type(c) for c in translator.started(marker)] == [StepStarted]
    assert translator.started(marker) == []  # a duplicate marker adds nothing
    ended_names = [type(c).__name__ for c in translator.ended(RENDER)]
    assert ended_names == ["ProgressReported", "StepEnded"]
    # A second delivery of the whole span is a new start: deduplication is the staging's job.
    assert [type(c).__name__ for c in translator.ended(RENDER)] == ["StepStarted", *ended_names]


def test_explicit_detail_and_outcome_ride_on_the_end() -> None:
    translator = SpanTranslator(problem=_no_problem)
    translator.started(JOB_SPAN)
    step = span(2, 1, 10, 40, {JOB_STEP_KEY: "RENDER", JOB_STEP_DETAIL: '{"url": "x"}'})
    (*_, step_end) = translator.ended(step)
    assert isinstance(step_end, StepEnded)
    assert step_end.explicit_detail == '{"url": "x"}'
    job = span(1, 0, 0, 100, {**JOB, "job.outcome": "target_deleted"})
    (job_end,) = translator.ended(job)
    assert isinstance(job_end, JobEnded)
    assert job_end.outcome == "target_deleted"


def test_a_named_error_wins_over_the_exception_that_wrapped_it() -> None:
    translator = SpanTranslator(problem=_no_problem)
    translator.started(JOB_SPAN)
    named = {JOB_ERROR: "OSError: x"}
    save = SpanFacts(**{**_fields(SAVE), "attributes": {**SAVE.attributes, **named}})
    job = SpanFacts(**{**_fields(JOB_SPAN), "attributes": {**JOB, **named}})
    *_, step_end = translator.ended(save)
    (job_end,) = translator.ended(job)
    assert isinstance(step_end, StepEnded)
    assert isinstance(job_end, JobEnded)
    assert (step_end.error, job_end.error) == ("OSError: x", "OSError: x")


def test_an_ordinary_event_takes_its_parents_scope() -> None:
    translator = SpanTranslator(problem=_no_problem)
    translator.started(JOB_SPAN)
    stalled = span(9, 1, 5, 5, {JOB_EVENT_TYPE: "STALLED"})
    (event,) = translator.started(stalled)
    assert isinstance(event, EventRecorded)
    assert translator.ended(stalled) == []  # recorded once
    assert (event.scope.job_id, event.type) == ("42", "STALLED")


def test_live_spans_unknown_at_their_end_are_ignored() -> None:
    translator = SpanTranslator(problem=_no_problem, received=False)
    assert translator.ended(RENDER) == []


@pytest.mark.parametrize(
    "attributes",
    [
        pytest.param({**JOB, JOB_ATTEMPT: 0}, id="attempt-zero"),
        pytest.param({**JOB, JOB_ATTEMPT: "٣"}, id="unicode-digit"),
        pytest.param({**JOB, JOB_ATTEMPT: "0\x1f"}, id="zero-and-a-separator"),
        pytest.param({**JOB, JOB_DOMAIN: ""}, id="empty-domain"),
        pytest.param({**JOB, JOB_ID: "x" * 513}, id="long-id"),
    ],
)
def test_invalid_job_spans_are_counted_once_and_open_nothing(attributes: dict[str, Any]) -> None:
    problems: list[str] = []
    translator = SpanTranslator(problem=lambda kind, _: problems.append(kind))
    bad = span(1, 0, 0, 100, attributes)
    assert translator.started(bad) == []
    assert translator.started(RENDER) == []  # its children are outside any scope
    assert problems == ["invalid_job_span"]


@pytest.mark.parametrize("received", [False, True])
@pytest.mark.parametrize(
    ("start_ms", "end_ms", "counted"),
    [(-5, 100, 1), (-5, -1, 1), (0, 10**20, 1), (0, 100, 0)],
    ids=["start", "both", "end", "none"],
)
def test_an_impossible_time_is_counted_once_per_span(
    received: bool, start_ms: int, end_ms: int, counted: int
) -> None:
    """A job span's start and end (live: two calls with one start time) count one problem."""
    problems: list[str] = []
    translator = SpanTranslator(problem=lambda kind, _: problems.append(kind), received=received)
    job = span(1, 0, start_ms, end_ms, JOB)
    translator.started(span(1, 0, start_ms, 0, JOB))
    translator.ended(job)
    if not received:  # live, a span outside any scope too (received: none is remembered)
        translator.started(span(9, 0, start_ms, 0, {}))
        translator.ended(span(9, 0, start_ms, end_ms, {}))
    assert problems == ["impossible_time"] * counted * (1 if received else 2)


def test_open_spans_are_bounded() -> None:
    problems: list[str] = []
    translator = SpanTranslator(problem=lambda kind, _: problems.append(kind), max_open_spans=2)
    for n in range(5):
        translator.started(span(100 + n, 0, 0, 0, {**JOB, JOB_ID: str(n)}))
    assert translator.open_spans() == 2
    assert problems == ["evicted_spans"] * 3


def _no_problem(kind: str, detail: object) -> None:
    raise AssertionError(f"unexpected problem {kind}: {detail}")


def test_progress_passed_on_is_not_written_again_at_the_close_even_with_nan() -> None:
    # The writer process receives the poll's and the end's attributes as two copies: a NaN in
    # them is two float objects, unequal to each other, yet the same progress.
    translator = SpanTranslator(problem=_no_problem, received=False)
    translator.started(SpanFacts(**{**_fields(JOB_SPAN), "end_ns": 0}))
    step = span(2, 1, 10, 40, {JOB_STEP_KEY: "RENDER"}, (progress(20, pct=float("nan")),))
    translator.started(SpanFacts(**{**_fields(step), "end_ns": 0}))
    assert translator.progress(2, {"pct": float("nan")}) is not None
    assert [type(c).__name__ for c in translator.ended(step)] == ["StepEnded"]
    step = span(2, 1, 10, 40, {JOB_STEP_KEY: "RENDER"}, (progress(20, v=(float("nan"), 1)),))
    translator.started(SpanFacts(**{**_fields(step), "end_ns": 0}))
    translator.progress(2, {"v": (float("nan"), 1)})  # an array attribute holding a NaN
    assert [type(c).__name__ for c in translator.ended(step)] == ["StepEnded"]
    newer = span(2, 1, 10, 40, {JOB_STEP_KEY: "RENDER"}, (progress(30, pct=float("nan"), n=1),))
    translator.started(SpanFacts(**{**_fields(newer), "end_ns": 0}))
    translator.progress(2, {"pct": float("nan")})
    assert [type(c).__name__ for c in translator.ended(newer)] == ["ProgressReported", "StepEnded"]
