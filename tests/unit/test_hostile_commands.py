"""Hostile values in any field of any command never change what a step or an attempt says:
statuses and times are those of the same commands with plain values, and every detail still
encodes to JSON PostgreSQL accepts (a detail that cannot be read becomes a marker)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_jobsteps._core.batch import EventRow, JobLogRow
from otel_jobsteps._core.commands import EventRecorded, JobEnded, ProgressReported, StepEnded
from otel_jobsteps._core.detail import encode_detail, parse_detail
from otel_jobsteps._core.recorder import StepRecorder
from otel_jobsteps._core.vocabulary import EVENT_NAMED_STEP
from otel_jobsteps.attributes import JOB_STEP_DETAIL
from tests.unit.recorder_support import FakeClock, command, script_commands, settle, written

DEEP = 1_000
deep_json = st.sampled_from(
    [
        "[" * DEEP + "]" * DEEP,
        '{"a":' * DEEP + "1" + "}" * DEEP,
        "[" * 100_000,
        '{"a": [' + '"[",' * 50 + "1]}",
        '{"a": NaN, "b": "\\u0000"}',
        "not json {",
        "",
    ]
)
texts = st.text(max_size=30) | deep_json
scalars = texts | st.integers() | st.floats() | st.booleans() | st.none() | st.binary(max_size=8)
values = scalars | st.lists(scalars, max_size=4) | st.tuples(scalars, scalars)
details = st.dictionaries(st.text(max_size=10) | st.integers(), values, max_size=4) | st.just(
    {JOB_STEP_DETAIL: "[" * DEEP + "]" * DEEP}
)


def _hostile(commands: list[Any], data: st.DataObject) -> list[Any]:
    """The same commands with hostile values in every field that carries data."""
    out: list[Any] = []
    for item in commands:
        if isinstance(item, StepEnded):
            error = data.draw(values) if item.failed else None
            item = item._replace(explicit_detail=data.draw(values), error=error)
        elif isinstance(item, JobEnded):
            # A string outcome is a reason by contract; anything else must be ignored.
            outcome = data.draw(values.filter(lambda v: not isinstance(v, str)))
            item = item._replace(outcome=outcome, error=data.draw(values))
        elif isinstance(item, ProgressReported):
            detail = data.draw(details)
            item = item._replace(attributes=detail)
        out.append(item)
        if data.draw(st.booleans()):  # an ordinary event of the same attempt
            detail = parse_detail(data.draw(values))
            message = data.draw(values)
            out.append(EventRecorded(item.scope, data.draw(texts), message, detail, 10**9))
    return out


def _outcome(commands: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    recorder = StepRecorder(debounce_ms=25, clock=FakeClock())
    ops = []
    for item in commands:
        recorder.handle(item)
        ops.extend(written(recorder.take_batch()))
    for _, op in ops:  # every detail reaches PostgreSQL as a JSON object
        if getattr(op, "detail", None) is not None:
            assert isinstance(json.loads(encode_detail(op.detail) or ""), dict)
    steps = [
        (r.attempt, r.execution_id, r.step_status, r.created_us, r.ended_us)
        for r in settle(ops)
        if r.type == "STEP"
    ]
    logs = [(o.attempt, o.status, o.created_us) for _, o in ops if isinstance(o, JobLogRow)]
    events = [
        (o.attempt, o.created_us) for _, o in ops if isinstance(o, EventRow) and o.type != "STEP"
    ]
    return steps, logs, events


@settings(max_examples=200, deadline=None)
@given(st.lists(command, max_size=25), st.data())
def test_hostile_values_never_change_statuses_or_times(
    script: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    plain = script_commands(script)
    hostile = _hostile(plain, data)
    steps, logs, _ = _outcome(plain)
    hostile_steps, hostile_logs, events = _outcome(hostile)
    assert (hostile_steps, hostile_logs) == (steps, logs)
    assert len(events) == sum(isinstance(c, EventRecorded) for c in hostile)


def test_an_ordinary_event_named_step_is_written_as_an_event() -> None:
    """``record_event("STEP")``: a row typed STEP is a step to every reader; this one is not."""
    (started,) = script_commands([("job_start", 0, 0)])
    recorder = StepRecorder(debounce_ms=25, clock=FakeClock())
    recorder.handle(started)
    recorder.handle(EventRecorded(started.scope, "STEP", "not a step", None, 10**9))
    rows = [op for _, op in written(recorder.take_batch()) if isinstance(op, EventRow)]
    assert [(row.type, row.step_key, row.message) for row in rows] == [
        (EVENT_NAMED_STEP, None, "not a step")
    ]
