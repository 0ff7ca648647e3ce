"""The step rules of the recorder: a step's row opened, given progress, closed; its log lines.

One open step per attempt: a new step closes the previous one, the same step reuses its row,
progress is debounced, a step never ends before it starts, LOG rows are capped per step key.
Steps that overlap: a step closed by a sibling's start whose own end then fails is FAILED. A
skipped step is a row ended SKIPPED, which neither opens nor closes a step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..attributes import JOB_STEP_DETAIL
from .attempts import Attempt, Attempts, OpenStep
from .batch import BatchBuilder, CloseStep, Detail, EventRow, FailClosedStep
from .commands import (
    LogRecorded,
    ProgressReported,
    Scope,
    StepEnded,
    StepRan,
    StepSkipped,
    StepStarted,
)
from .debounce import Debounce
from .detail import clean_text, parse_detail
from .limits import MAX_STEP_KEY_CHARS, step_key_text
from .vocabulary import COMPLETED, FAILED, LOG, RUNNING, SKIPPED, STEP, TIME_LIMIT

__all__ = ["MAX_STEP_KEY_CHARS", "StepRows", "is_late"]


def is_late(scope: Scope, end_ns: int) -> bool:
    """Ended after the attempt's time limit."""
    return scope.deadline_ns is not None and end_ns > scope.deadline_ns


def _closing(
    state: Attempt, row: EventRow, ended_us: int, message: str | None
) -> tuple[int, str | None]:
    """A step close's time, never before the row's start (on every path), and its message made
    safe; the attempt's last close moves with it (its final row is never dated before)."""
    if ended_us < row.created_us:
        ended_us = row.created_us
    if ended_us > state.last_close_us:
        state.last_close_us = ended_us
    return ended_us, None if message is None else clean_text(message)


def _progress_detail(attributes: Mapping[str, Any]) -> Detail:
    """The detail a progress event carries: its attributes, or the one JSON object it names."""
    if len(attributes) == 1 and JOB_STEP_DETAIL in attributes:
        return parse_detail(attributes[JOB_STEP_DETAIL]) or {}
    return attributes if type(attributes) is dict else dict(attributes)


class StepRows:
    """Step and log commands -> row operations in ``batch``, for the attempts in ``attempts``."""

    def __init__(
        self,
        attempts: Attempts,
        batch: BatchBuilder,
        debounce: Debounce[OpenStep],
        *,
        logs_max_per_step: int,
    ) -> None:
        self._attempts, self._batch, self._debounce = attempts, batch, debounce
        self._logs_max = logs_max_per_step
        self._last_span = (0, "")  # the span id of the latest log line, and its hex

    def handlers(self) -> dict[type, Callable[[Any], None]]:
        """The commands these rules apply, by type: the recorder dispatches them here."""
        return {
            StepStarted: self.step_started,
            ProgressReported: self.progress,
            StepEnded: self.step_ended,
            StepRan: self.step_ran,
            StepSkipped: self.step_skipped,
            LogRecorded: self.log,
        }

    def step_started(self, command: StepStarted) -> None:
        state = self._attempts.open(command.scope)
        key = step_key_text(command.key)
        open_step = state.open
        if open_step is not None and open_step.key == key:
            open_step.holders += 1
            return
        row = self._new_step_row(state, key, command.span_id, command.start_ns // 1000)
        state.open = OpenStep(key, row, state)

    def _new_step_row(self, state: Attempt, key: str, span_id: int, start_us: int) -> EventRow:
        """The row of a step that starts now (RUNNING), after closing the one open before."""
        if state.open is not None:
            self.close(state, state.open, COMPLETED, None, None, start_us)
        elif state.forgotten:
            self.close_unknown_step(state, COMPLETED, None, start_us)
        # Positional (EventRow's field order): this runs once per step on the writer thread.
        row = EventRow(
            *state.scope[:4], STEP, key, RUNNING, None, None, state.trace_hex,
            format(span_id, "016x"), state.execution_id, start_us, None,
        )  # fmt: skip
        self._batch.add_step(row, state.execution_id)
        state.last_step = key
        return row

    def step_ran(self, command: StepRan) -> None:
        """Start, progress and end at once: one row inserted closed (or folded, as always)."""
        state = self._attempts.open(command.scope)
        key = step_key_text(command.key)
        if state.open is not None and state.open.key == key:
            # The same step is open already: this span joins and leaves it, its progress counts.
            scope, raw_key = command.scope, command.key
            self.step_started(StepStarted(scope, raw_key, command.span_id, command.start_ns))
            if command.progress:
                self.progress(ProgressReported(scope, raw_key, command.progress))
            self.step_ended(
                StepEnded(
                    scope, raw_key, command.end_ns, command.failed, command.explicit_detail,
                    command.error,
                )
            )  # fmt: skip
            return
        row = self._new_step_row(state, key, command.span_id, command.start_ns // 1000)
        explicit = command.explicit_detail
        if explicit is not None:
            row.detail = parse_detail(explicit)
        elif command.progress:
            row.detail = _progress_detail(command.progress)
        row.step_status, message = self._end_status(state.scope, command)
        row.ended_us, row.message = _closing(state, row, command.end_ns // 1000, message)

    def progress(self, command: ProgressReported) -> None:
        scope = command.scope
        state = self._attempts.get(scope)
        if state is None or state.open is None:
            return  # the step was closed already: a late event must not touch any row
        if state.open.key != step_key_text(command.key):
            return  # another step is open now
        step = state.open
        detail = _progress_detail(command.attributes)
        debounce = self._debounce
        now = debounce.now()
        if self._batch.is_unwritten(step.row):
            # The row itself is not written yet: it carries the latest detail, no timer needed.
            step.row.detail = detail
            debounce.coalesced(step, now)
            return
        due_now = debounce.offer(step, detail, now)
        if due_now is not None:
            self.write_progress(step, due_now, now)

    def step_skipped(self, command: StepSkipped) -> None:
        """A skipped step's row, ended SKIPPED; the step open stays open (unless it is this
        very span's, which said it was skipped only as it ended)."""
        state = self._attempts.open(command.scope)
        span_hex = format(command.span_id, "016x")
        explicit = parse_detail(command.explicit_detail)
        end_us = command.end_ns // 1000
        step = state.open
        if step is not None and step.row.span_id == span_hex:
            self.close(state, step, SKIPPED, explicit, None, end_us)
            return
        row = EventRow(
            *state.scope[:4], STEP, step_key_text(command.key), SKIPPED, explicit,
            None, state.trace_hex, span_hex, state.execution_id, command.start_ns // 1000, None,
        )  # fmt: skip
        row.ended_us = _closing(state, row, end_us, None)[0]
        self._batch.add_event(row)

    def step_ended(self, command: StepEnded) -> None:
        scope = command.scope
        state = self._attempts.get(scope)
        key = step_key_text(command.key)
        if state is None:
            return  # closed already by the job's end
        if state.open is None or state.open.key != key:
            if command.span_id and (command.failed or is_late(scope, command.end_ns)):
                self._fail_closed_by_sibling(state, command)
            return  # closed already by the next step
        step = state.open
        step.holders -= 1
        if step.holders > 0:
            return
        status, message = self._end_status(state.scope, command)
        explicit = parse_detail(command.explicit_detail)
        self.close(state, step, status, explicit, message, command.end_ns // 1000)

    def _fail_closed_by_sibling(self, state: Attempt, command: StepEnded) -> None:
        """Steps that overlap: this step's row was closed COMPLETED when a sibling started, and
        its own end fails: the row becomes FAILED with its error (a guarded update, so a row
        closed otherwise stays as it is, whichever batch wrote the close)."""
        message = self._end_status(state.scope, command)[1]
        ended_us = command.end_ns // 1000
        state.last_close_us = max(state.last_close_us, ended_us)
        state.last_step = step_key_text(command.key)  # the attempt's failing step, if it fails
        scope = state.scope
        failure = FailClosedStep(
            scope.domain, scope.job_id, scope.attempt, state.execution_id,
            format(command.span_id, "016x"), None if message is None else clean_text(message),
            ended_us,
        )  # fmt: skip
        self._batch.add_sibling_failure(failure)

    def _end_status(self, scope: Scope, command: StepEnded | StepRan) -> tuple[str, str | None]:
        """A step span's end: FAILED with its error, FAILED time_limit when it ended after the
        attempt's limit, else COMPLETED."""
        if command.failed:
            return FAILED, command.error
        if is_late(scope, command.end_ns):
            return FAILED, TIME_LIMIT
        return COMPLETED, None

    def close(
        self,
        state: Attempt,
        step: OpenStep,
        status: str,
        explicit: Detail | None,
        message: str | None,
        ended_us: int,
    ) -> None:
        # Cancel the trailing write first: its detail rides with the close instead.
        pending = self._debounce.cancel(step)
        detail = explicit if explicit is not None else pending
        state.open = None
        row = step.row
        ended_us, message = _closing(state, row, ended_us, message)
        if state.logs is not None:
            self.logs_dropped(state, step.key, ended_us)
        if self._batch.is_unwritten(row):
            row.step_status = status
            row.ended_us = ended_us
            if detail is not None:
                row.detail = detail
            row.message = message
            return
        scope = state.scope
        self._batch.add_close(
            CloseStep(
                scope.domain,
                scope.job_id,
                scope.attempt,
                state.execution_id,
                step.key,
                status,
                detail,
                message,
                ended_us,
            )
        )

    def close_unknown_step(
        self, state: Attempt, status: str, message: str | None, ended_us: int
    ) -> None:
        """Close whichever step this execution holds open: what it was was forgotten."""
        state.forgotten = False
        state.last_close_us = max(state.last_close_us, ended_us)
        scope = state.scope
        close = CloseStep(
            scope.domain, scope.job_id, scope.attempt, state.execution_id, None, status,
            None, message, ended_us,
        )  # fmt: skip
        self._batch.add_close(close)

    def write_progress(self, step: OpenStep, detail: Detail, now: float) -> None:
        self._debounce.written(step, now)
        if self._batch.is_unwritten(step.row):
            step.row.detail = detail
            return
        state = step.attempt
        self._batch.add_progress(step, state.scope, state.execution_id, step.key, detail)

    def log(self, command: LogRecorded) -> None:
        """A LOG row, within the per-step cap (lines over it are counted for one later row)."""
        scope = command.scope
        state = self._attempts.get(scope)
        key = None if command.key is None else step_key_text(command.key)
        execution = scope.execution
        if state is not None:
            execution = state.execution_id
            logs = state.logs
            if logs is None:
                logs = state.logs = {}
            counts = logs.get(key)
            if counts is None:
                counts = logs[key] = [0, 0]
            if counts[0] >= self._logs_max:
                counts[1] += 1
                return
            counts[0] += 1
        detail: Detail = {"severity": command.severity, "attributes": command.attributes}
        trace_id = None
        if state is not None and command.trace_id == scope.trace_id:
            trace_id = state.trace_hex  # the attempt's trace, as its other rows have it
        elif command.trace_id:
            trace_id = format(command.trace_id, "032x")
        span_id = self._span_hex(command.span_id) if command.span_id else None
        row = EventRow(
            *scope[:4], LOG, key, None, detail, command.message, trace_id, span_id,
            execution, command.time_ns // 1000, None,
        )  # fmt: skip
        self._batch.add_event(row)

    def _span_hex(self, span_id: int) -> str:
        """A span id's hex, remembered for the next line (a step's lines share their span)."""
        if span_id != self._last_span[0]:
            self._last_span = (span_id, format(span_id, "016x"))
        return self._last_span[1]

    def logs_dropped(self, state: Attempt, key: str | None, at_us: int) -> None:
        """One LOG row saying how many lines of ``key`` the cap dropped since the last such row."""
        counts = state.logs.get(key) if state.logs is not None else None
        if counts is None or counts[1] == 0:
            return
        dropped, counts[1] = counts[1], 0
        scope = state.scope
        row = EventRow(
            *scope[:4], LOG, key, None,
            {"severity": "WARN", "dropped": dropped, "attributes": {}},
            f"{dropped} log lines dropped (over the cap of {self._logs_max} per step)",
            state.trace_hex, format(scope.span_id, "016x"), state.execution_id, at_us, None,
        )  # fmt: skip
        self._batch.add_event(row)
