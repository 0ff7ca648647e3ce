"""Progress log events: debounced by the recorder like span events (an injected clock), and
ordered with span-event progress by their times."""

from __future__ import annotations

from typing import Any

import pytest

from otel_jobsteps._core.commands import Command
from otel_jobsteps._core.facts import LogFacts
from otel_jobsteps._core.recorder import StepRecorder
from otel_jobsteps._core.translate import SpanTranslator
from tests.unit.recorder_support import MS, FakeClock, written
from tests.unit.test_translate import JOB_SPAN, RENDER, TRACE


def progress_log(at_ms: int, **detail: Any) -> LogFacts:
    return LogFacts(TRACE, RENDER.span_id, at_ms * MS, "progress", 0, None, None, detail)


def details(commands: list[Command], recorder: StepRecorder) -> list[Any]:
    for command in commands:
        recorder.handle(command)
    return [getattr(op, "detail", "-") for _, op in written(recorder.take_batch())]


def test_progress_log_events_are_debounced_like_span_events() -> None:
    clock = FakeClock()
    recorder = StepRecorder(debounce_ms=1000, clock=clock)
    translator = SpanTranslator(problem=lambda *_: None, received=False)
    start = details(translator.started(JOB_SPAN) + translator.started(RENDER), recorder)
    assert start[-1] is None  # the step's row, written without detail
    assert details(translator.log(progress_log(11, pct=1)), recorder) == [{"pct": 1}]  # at once
    clock.advance(0.2)
    assert details(translator.log(progress_log(12, pct=2)), recorder) == []
    clock.advance(0.2)
    assert details(translator.log(progress_log(13, pct=3)), recorder) == []
    assert recorder.next_due() == pytest.approx(clock.now + 0.6)
    clock.advance(0.61)
    recorder.fire_due()
    assert details([], recorder) == [{"pct": 3}]  # one trailing write, the newest


def test_a_polled_span_event_older_than_a_progress_log_record_is_not_passed_on() -> None:
    translator = SpanTranslator(problem=lambda *_: None, received=False)
    translator.started(JOB_SPAN)
    translator.started(RENDER)
    assert translator.progress(RENDER.span_id, {"pct": 5}, 11 * MS) is not None  # no log yet
    assert translator.log(progress_log(20, pct=50))
    assert translator.progress(RENDER.span_id, {"pct": 10}, 15 * MS) is None  # older: ignored
    newer = translator.progress(RENDER.span_id, {"pct": 60}, 25 * MS)
    assert newer is not None
    assert newer.attributes == {"pct": 60}
    assert translator.log(progress_log(22, pct=55)) == []  # older than the span event passed on
