"""StepRan (a step's start, newest progress and end arriving together, as the writer reads an
adjacent start and end) must write exactly what StepStarted, ProgressReported and StepEnded
write one after the other: the same operations in the same batches, whatever comes around it."""

from __future__ import annotations

from dataclasses import astuple
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_jobsteps._core.commands import ProgressReported, StepEnded, StepRan, StepStarted
from otel_jobsteps._core.recorder import StepRecorder
from tests.unit.recorder_support import MS, SCOPES, FakeClock, command, script_commands, written

# A step key the recorder cleans (NUL) is open under its cleaned name: its progress is not found.
KEYS = st.sampled_from(["A", "B", "C", "A\x00"])
ran = st.tuples(
    st.just("ran"),
    st.integers(0, 3),
    KEYS,
    st.one_of(st.none(), st.integers(0, 9)),  # progress
    st.booleans(),  # failed
    st.sampled_from([None, '{"x": 1}', "not json"]),  # explicit detail
    st.sampled_from([0, 5, -3]),  # duration in ms (negative: an end before its start)
)


def _units(script: list[tuple[Any, ...]], *, fused: bool) -> list[list[Any]]:
    """One list of commands per script entry; a 'ran' entry as StepRan or as its three parts."""
    units: list[list[Any]] = []
    for t, entry in enumerate(script, start=1):
        if entry[0] != "ran":
            units.append(script_commands([entry]))
            continue
        _, who, key, progress, failed, explicit, duration = entry
        scope, at = SCOPES[who], (1000 + t * 10) * MS
        attributes = {} if progress is None else {"n": progress}
        error = "E" if failed else None
        end = at + duration * MS
        span = 5000 + t
        if fused:
            units.append([StepRan(scope, key, span, at, end, failed, explicit, error, attributes)])
            continue
        parts: list[Any] = [StepStarted(scope, key, span, at)]
        if attributes:
            parts.append(ProgressReported(scope, key, attributes))
        parts.append(StepEnded(scope, key, end, failed, explicit, error))
        units.append(parts)
    return units


def _operations(units: list[list[Any]], cuts: set[int]) -> list[list[tuple[str, Any]]]:
    clock = FakeClock()
    recorder = StepRecorder(debounce_ms=25, clock=clock)
    batches = []
    for index, unit in enumerate(units):
        clock.advance(0.01)
        recorder.fire_due()
        for item in unit:
            recorder.handle(item)
        if index in cuts:
            batches.append([(name, astuple(op)) for name, op in written(recorder.take_batch())])
    recorder.flush_timers()
    batches.append([(name, astuple(op)) for name, op in written(recorder.take_batch())])
    return batches


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(command, ran), max_size=40), st.sets(st.integers(0, 40)))
def test_a_step_ran_writes_what_its_start_progress_and_end_write(
    script: list[tuple[Any, ...]], cuts: set[int]
) -> None:
    fused = _operations(_units(script, fused=True), cuts)
    assert fused == _operations(_units(script, fused=False), cuts)
