"""LOG rows never change what the other rows say: any interleaving of log lines with a script
of steps and attempts leaves the STEP rows, the events and the final rows as they were (an
attempt whose log lines were its only rows is settled by a later attempt's start like any
attempt with rows)."""

from __future__ import annotations

from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from otel_jobsteps._core.batch import EventRow, JobLogRow
from otel_jobsteps._core.commands import JobEnded, JobStarted, LogRecorded
from otel_jobsteps._core.recorder import StepRecorder
from otel_jobsteps._core.vocabulary import ABANDONED, LOG
from otel_jobsteps.testing import apply
from tests.unit.recorder_support import MS, SCOPES, FakeClock, command, script_commands, written

line = st.tuples(
    st.integers(0, len(SCOPES) - 1), st.sampled_from(["A", "B", "C", None]), st.integers(0, 60)
)


def _settled(commands: list[Any], cuts: set[int], cap: int) -> tuple[list[EventRow], list[Any]]:
    recorder = StepRecorder(debounce_ms=100, clock=FakeClock(), logs_max_per_step=cap)
    events: list[EventRow] = []
    logs: list[JobLogRow] = []
    for number, one in enumerate(commands):
        recorder.handle(one)
        if number in cuts:
            apply(written(recorder.take_batch()), events, logs)
    recorder.flush_timers()  # a trailing progress write is due at the end, however cut
    apply(written(recorder.take_batch()), events, logs)
    return events, sorted((log.job_id, log.attempt, log.status, log.reason) for log in logs)


def _with_lines(
    plain: list[Any], lines: list[tuple[int, tuple[int, str | None, int]]]
) -> list[Any]:
    """``plain`` with each line inserted at its place, if its attempt is open there (as the
    translation guarantees: a record's job span has started and not ended)."""
    at_place: dict[int, list[tuple[int, str | None, int]]] = {}
    for at, entry in lines:
        at_place.setdefault(min(at, len(plain)), []).append(entry)
    mixed: list[Any] = []
    open_scopes: set[Any] = set()
    for place in range(len(plain) + 1):
        for who, key, time_ms in at_place.get(place, []):
            if SCOPES[who] in open_scopes:
                at = (1000 + time_ms) * MS
                mixed.append(LogRecorded(SCOPES[who], key, at, "INFO", "l", {}, 1, 7))
        if place < len(plain):
            one = plain[place]
            if type(one) is JobStarted:
                open_scopes.add(one.scope)
            elif type(one) is JobEnded:
                open_scopes.discard(one.scope)
            mixed.append(one)
    return mixed


@settings(max_examples=200, deadline=None)
@given(
    st.lists(command, max_size=30),
    st.lists(st.tuples(st.integers(0, 40), line), max_size=30),
    st.sets(st.integers(0, 70)),
    st.integers(1, 3),
)
def test_log_lines_leave_every_other_row_as_it_was(
    script: list[tuple[Any, ...]],
    lines: list[tuple[int, tuple[int, str | None, int]]],
    cuts: set[int],
    cap: int,
) -> None:
    plain = script_commands(script)
    mixed = _with_lines(plain, lines)
    without_events, without_logs = _settled(plain, set(), cap)
    with_events, with_logs = _settled(mixed, cuts, cap)
    # Log lines make an attempt visible: a later attempt's start settles it (abandoned) as it
    # does an attempt with any row. That is the one difference in the final rows.
    abandoned = {log[:2] for log in without_logs if log[3] == ABANDONED}
    visible = {log[:2] for log in with_logs if log[3] == ABANDONED} - abandoned
    assert [log for log in with_logs if log[:2] not in visible] == [
        log for log in without_logs if log[:2] not in visible
    ]
    others = [row for row in with_events if row.type != LOG]
    assert [
        (r.type, r.step_key, r.step_status, r.detail, r.message, r.ended_us) for r in others
    ] == [
        (r.type, r.step_key, r.step_status, r.detail, r.message, r.ended_us) for r in without_events
    ]
    event(
        f"dropped-count rows: {sum(bool((r.detail or {}).get('dropped')) for r in with_events) > 0}"
    )
    for row in with_events:
        if row.type == LOG:
            assert (row.step_status, row.ended_us) == (None, None)
    # Per attempt and key: at most `cap` lines, then dropped-count rows (for a job span started
    # once: the script may start the same one again after its end, a new attempt in memory).
    starts = [one.scope for one in plain if type(one) is JobStarted]
    once = {
        f"{scope.trace_id:032x}:{scope.span_id:016x}"
        for scope in starts
        if starts.count(scope) == 1
    }
    kept: dict[tuple[Any, ...], int] = {}
    for row in with_events:
        if row.type == LOG and row.execution_id in once and not (row.detail or {}).get("dropped"):
            key = (row.job_id, row.attempt, row.execution_id, row.step_key)
            kept[key] = kept.get(key, 0) + 1
    assert all(count <= cap for count in kept.values())
