"""The one interpreter holds a dialect's job span, with what happens in it, until it ends: then
the dialect gives the spans their meaning and they are told in the order they came."""

from __future__ import annotations

from typing import Any

from otel_jobsteps._core.commands import (
    Command,
    JobEnded,
    JobStarted,
    LogRecorded,
    StepEnded,
    StepRan,
    StepStarted,
)
from otel_jobsteps._core.dialects import select_dialects
from otel_jobsteps._core.dialects.base import KIND_CONSUMER
from otel_jobsteps._core.facts import LogFacts, SpanFacts
from otel_jobsteps._core.interpreter import Interpreter, OneTranslator
from otel_jobsteps._core.translate import SpanTranslator
from otel_jobsteps.attributes import JOB_STEP_KEY

TRACE = 7
DONE = {
    "celery.action": "run",
    "celery.state": "SUCCESS",
    "messaging.message.id": "task-1",
    "celery.task_name": "resize",
    "messaging.destination": "images",
}


class _Told:
    def __init__(self) -> None:
        self.commands: list[Command] = []

    def handle(self, command: Command) -> None:
        self.commands.append(command)

    def resume(self, command: Command) -> None:
        self.commands.append(command)


def _interpreter(problems: list[str] | None = None, **options: Any) -> tuple[Interpreter, _Told]:
    told = _Told()
    translator = SpanTranslator(problem=lambda kind, detail: None, received=False)
    interpreter = Interpreter(
        OneTranslator(translator),
        told,
        dialects=select_dialects("celery"),
        problem=lambda kind, detail: (problems if problems is not None else []).append(kind),
        **options,
    )
    return interpreter, told


def _span(span_id: int, parent: int, start: int, end: int, **attributes: Any) -> SpanFacts:
    name = "run/resize" if span_id == 1 else f"s{span_id}"
    kind = KIND_CONSUMER if span_id == 1 else 1
    return SpanFacts(TRACE, span_id, parent, name, start, end, attributes, kind=kind)


def _run(interpreter: Interpreter, *, log: bool = True) -> None:
    """A Celery run (named only at its end) with two steps and a log line in the first."""
    interpreter.start(_span(1, 0, 100, 0))
    interpreter.start(_span(2, 1, 110, 0, **{JOB_STEP_KEY: "FETCH"}))
    if log:
        interpreter.log(LogFacts(TRACE, 2, 115, None, 9, "INFO", "fetched", {}))
    interpreter.end(_span(2, 1, 110, 120, **{JOB_STEP_KEY: "FETCH"}))
    interpreter.start(_span(3, 1, 130, 140, **{JOB_STEP_KEY: "SAVE"}), ended=True)
    interpreter.end(_span(3, 1, 130, 140, **{JOB_STEP_KEY: "SAVE"}))


def test_a_job_named_only_at_its_end_gets_its_steps_and_lines_then_in_order() -> None:
    interpreter, told = _interpreter()
    _run(interpreter)
    assert told.commands == []  # held: nothing is known of the job yet
    interpreter.end(_span(1, 0, 100, 200, **DONE))
    kinds = [type(command) for command in told.commands]
    assert kinds == [JobStarted, StepStarted, LogRecorded, StepEnded, StepRan, JobEnded]
    started = told.commands[0]
    assert isinstance(started, JobStarted)
    assert (started.scope.domain, started.scope.job_id, started.scope.attempt) == (
        "images",
        "task-1",
        1,
    )
    line = told.commands[2]
    assert isinstance(line, LogRecorded)
    assert line.key == "FETCH"
    (whole,) = [c for c in told.commands if isinstance(c, StepRan)]
    assert (whole.key, whole.start_ns, whole.end_ns) == ("SAVE", 130, 140)


def test_a_span_the_dialect_does_not_make_a_job_leaves_nothing() -> None:
    interpreter, told = _interpreter()
    _run(interpreter)
    interpreter.end(_span(1, 0, 100, 200))  # no task id at its end: not a job after all
    assert told.commands == []
    interpreter.start(_span(4, 0, 300, 0, **{JOB_STEP_KEY: "X"}))  # nothing held any more
    assert told.commands == []


def test_progress_of_a_held_step_waits_for_its_end() -> None:
    interpreter, _ = _interpreter()
    interpreter.start(_span(1, 0, 100, 0))
    interpreter.start(_span(2, 1, 110, 0, **{JOB_STEP_KEY: "FETCH"}))
    assert interpreter.progress(TRACE, 2, {"done": 1}, 111) is False


def test_the_oldest_held_unit_is_dropped_past_the_bound_and_counted() -> None:
    problems: list[str] = []
    interpreter, told = _interpreter(problems, max_held_units=1)
    interpreter.start(_span(1, 0, 100, 0))
    interpreter.start(SpanFacts(8, 1, 0, "run/resize", 150, 0, {}, kind=KIND_CONSUMER))
    assert problems == ["dropped_unit"]
    interpreter.end(_span(1, 0, 100, 200, **DONE))  # its unit is gone: read as any span
    assert told.commands == []


def test_without_dialects_a_run_span_is_read_as_it_comes() -> None:
    told = _Told()
    translator = SpanTranslator(problem=lambda kind, detail: None, received=False)
    interpreter = Interpreter(OneTranslator(translator), told, dialects=select_dialects("none"))
    _run(interpreter)
    interpreter.end(_span(1, 0, 100, 200, **DONE))
    assert told.commands == []  # its steps ran outside any job scope


def test_a_job_of_the_codes_own_inside_a_unit_is_told_as_it_starts() -> None:
    """Our Celery integration inside OpenTelemetry's Celery instrumentation: the run span is
    claimed, but the job span inside names its job; its rows must not wait for the run's end."""
    interpreter, told = _interpreter()
    interpreter.start(_span(1, 0, 100, 0))
    own = {"job.domain": "d", "job.id": "own", "job.attempt": 1}
    interpreter.start(_span(4, 1, 105, 0, **own))
    interpreter.start(_span(5, 4, 110, 0, **{JOB_STEP_KEY: "FETCH"}))
    assert [type(command) for command in told.commands] == [JobStarted, StepStarted]
    assert interpreter.progress(TRACE, 5, {"done": 1}, 111) is True  # live, not held
