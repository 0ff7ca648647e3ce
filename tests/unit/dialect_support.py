"""Helpers for the dialect tests: spans shaped as a source emits them, and the rows a unit gives
once recognised (through the one translation and the recorder, in the order the spans ran)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from otel_jobsteps._core.batch import EventRow, JobLogRow
from otel_jobsteps._core.commands import Command
from otel_jobsteps._core.dialects import select_dialects
from otel_jobsteps._core.dialects.base import KIND_INTERNAL
from otel_jobsteps._core.events import EventLike
from otel_jobsteps._core.facts import NO_RESOURCE, SpanFacts
from otel_jobsteps._core.recorder import StepRecorder
from otel_jobsteps._core.translate import SpanTranslator
from otel_jobsteps._core.vocabulary import STEP
from tests.unit.recorder_support import MS, settle, written

TRACE = 0x5EED


def span(
    span_id: int,
    parent: int,
    name: str,
    start_ms: int,
    end_ms: int,
    attributes: Mapping[str, Any] | None = None,
    *,
    kind: int = KIND_INTERNAL,
    error: bool = False,
    message: str | None = None,
    events: Sequence[EventLike] = (),
    resource: Mapping[str, Any] = NO_RESOURCE,
) -> SpanFacts:
    """One ended span of the test trace, times in milliseconds."""
    return SpanFacts(
        TRACE, span_id, parent, name, start_ms * MS, end_ms * MS, dict(attributes or {}), events,
        error, message, kind, resource,
    )  # fmt: skip


def recognised(unit: Sequence[SpanFacts], dialects: str = "all") -> list[SpanFacts]:
    """``unit`` as the selected dialects give it meaning (its root claimed at its start)."""
    selected = select_dialects(dialects)
    root = unit[0]
    assert selected.may_start_job(root.name, root.kind, root.attributes) is not None
    return selected.recognise(unit)


def by_name(spans: Sequence[SpanFacts]) -> dict[str, Mapping[str, Any]]:
    """Each span's attributes by its name (names are unique in these tests)."""
    return {each.name: each.attributes for each in spans}


def rows(
    spans: Sequence[SpanFacts], problems: list[str] | None = None
) -> tuple[list[EventRow], list[JobLogRow]]:
    """The ``job_event`` and ``job_log`` rows of recognised spans, told to the translation as
    the core tells a held unit: each start and end in the order they happened. A problem the
    translation counts fails the test, or is added to ``problems`` if given."""
    moments = sorted(
        [((each.start_ns, 1, index), each, False) for index, each in enumerate(spans)]
        + [((each.end_ns, 0, -index), each, True) for index, each in enumerate(spans)],
        key=lambda moment: moment[0],
    )
    problem = _no_problem if problems is None else lambda kind, _: problems.append(kind)
    translator = SpanTranslator(problem=problem, received=False)
    recorder = StepRecorder(debounce_ms=0)
    for _, facts, ended in moments:
        if ended:
            commands: list[Command] = translator.ended(facts)
        else:
            start = SpanFacts(**{name: getattr(facts, name) for name in SpanFacts.__slots__})
            start.end_ns = 0
            commands = translator.started(start)
        for command in commands:
            recorder.handle(command)
    logs: list[JobLogRow] = []
    events = settle(written(recorder.take_batch()), logs=logs)
    return events, logs


def steps(events: Sequence[EventRow]) -> list[tuple[str | None, str | None, str | None]]:
    """(step key, status, message) of each step row, in order."""
    return [(row.step_key, row.step_status, row.message) for row in events if row.type == STEP]


def _no_problem(kind: str, message: object) -> None:
    raise AssertionError(f"problem {kind}: {message}")
