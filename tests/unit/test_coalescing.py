"""Batching must not change what the rows say: any cut of a command stream into batches
settles to the same rows as writing after every single command, impossible times included (an
end before its start, an attempt's end before its steps): no duration is ever negative."""

from __future__ import annotations

from dataclasses import astuple
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_jobsteps.batch import JobLogRow
from otel_jobsteps.recorder import (
    JobEnded,
    JobStarted,
    ProgressReported,
    Scope,
    StepEnded,
    StepRecorder,
    StepStarted,
)
from tests.unit.recorder_support import MS, FakeClock, settle, written

# Two jobs; job "a" has two attempts and a second execution of attempt 1 (a re-run).
SCOPES = [
    Scope("d", "a", "t", 1, None, 1, 11, None),
    Scope("d", "a", "t", 1, None, 1, 12, None),
    Scope("d", "a", "t", 2, None, 1, 13, None),
    Scope("d", "b", "t", 1, None, 2, 21, 50 * MS),
]

# Span times mostly move forward; a skew sends one far back (before earlier starts).
skew = st.sampled_from([0, 0, 0, -35, -1000])
command = st.one_of(
    st.tuples(st.just("job_start"), st.integers(0, 3), skew),
    st.tuples(st.just("start"), st.integers(0, 3), skew, st.sampled_from("ABC")),
    st.tuples(
        st.just("progress"), st.integers(0, 3), skew, st.sampled_from("ABC"), st.integers(0, 9)
    ),
    st.tuples(st.just("end"), st.integers(0, 3), skew, st.sampled_from("ABC"), st.booleans()),
    st.tuples(st.just("job_end"), st.integers(0, 3), skew, st.booleans()),
)


def _commands(script: list[tuple[Any, ...]]) -> list[Any]:
    commands: list[Any] = []
    for t, (kind, who, skew_ms, *args) in enumerate(script, start=1):
        scope, at = SCOPES[who], (1000 + t * 10 + skew_ms) * MS
        if kind == "job_start":
            commands.append(JobStarted(scope, at))
        elif kind == "start":
            commands.append(StepStarted(scope, args[0], 1000 + t, at))
        elif kind == "progress":
            detail = {"n": args[1]}
            commands.append(ProgressReported(scope, args[0], lambda detail=detail: detail))
        elif kind == "end":
            commands.append(StepEnded(scope, args[0], at, args[1], None, "E" if args[1] else None))
        else:
            commands.append(JobEnded(scope, at, args[0], None, "E" if args[0] else None))
    return commands


def _run(commands: list[Any], cuts: set[int]) -> tuple[list[tuple[Any, ...]], list[Any]]:
    clock = FakeClock()
    recorder = StepRecorder(debounce_ms=25, clock=clock)
    ops: list[tuple[str, Any]] = []
    for index, item in enumerate(commands):
        clock.advance(0.01)
        recorder.fire_due()
        recorder.handle(item)
        if index in cuts:
            ops.extend(written(recorder.take_batch()))
    recorder.flush_timers()
    ops.extend(written(recorder.take_batch()))
    settled = settle(ops)
    for row in settled:
        assert row.ended_us is None or row.ended_us >= row.created_us, row
    logs = [op for _, op in ops if isinstance(op, JobLogRow)]
    first_logs = {}
    for log in logs:
        first_logs.setdefault((log.job_id, log.attempt), (log.status, log.reason, log.created_us))
    rows = [astuple(row)[:-1] for row in settled]  # all but the segment number
    return rows, sorted(first_logs.items())


@settings(max_examples=300, deadline=None)
@given(st.lists(command, max_size=40), st.sets(st.integers(0, 40)))
def test_any_batching_settles_like_one_command_at_a_time(
    script: list[tuple[Any, ...]], cuts: set[int]
) -> None:
    commands = _commands(script)
    one_at_a_time = _run(commands, set(range(len(commands))))
    assert _run(commands, cuts) == one_at_a_time
    assert _run(commands, set()) == one_at_a_time
