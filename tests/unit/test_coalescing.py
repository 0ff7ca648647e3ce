"""Batching must not change what the rows say: any cut of a command stream into batches
settles to the same rows as writing after every single command, impossible times included (an
end before its start, an attempt's end before its steps): no duration is ever negative."""

from __future__ import annotations

from dataclasses import astuple
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_jobsteps._core.batch import JobLogRow
from otel_jobsteps._core.recorder import StepRecorder
from tests.unit.recorder_support import (
    FakeClock,
    command,
    script_commands,
    settle,
    written,
)


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
    commands = script_commands(script)
    one_at_a_time = _run(commands, set(range(len(commands))))
    assert _run(commands, cuts) == one_at_a_time
    assert _run(commands, set()) == one_at_a_time
