"""The sequential step model: the translation's commands -> row operations in a `Batch`.

Pure logic with an injectable clock, run by the writer: one open step per attempt, progress
debounced, impossible times clamped, at most ``max_open_attempts`` attempts kept.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ._batch import Abandon, Batch, BatchBuilder, CloseStep, Detail, EventRow, JobLogRow
from ._commands import (
    Command,
    EventRecorded,
    JobEnded,
    JobStarted,
    LogRecorded,
    ProgressReported,
    Scope,
    StepEnded,
    StepRan,
    StepStarted,
)
from ._debounce import Debounce, Window
from ._detail import clean_text, parse_detail
from ._vocabulary import (
    CANCELLED,
    COMPLETED,
    ERROR,
    FAILED,
    LOG,
    OUTCOME_COMPLETED,
    RUNNING,
    STEP,
    TAG,
    TIME_LIMIT,
)
from .attributes import JOB_STEP_DETAIL
from .errors import ConfigurationError

__all__ = ["StepRecorder"]

MAX_STEP_KEY_CHARS = 256
MAX_REASON_CHARS = 64
DEFAULT_MAX_OPEN_ATTEMPTS = 10_000
DEFAULT_LOGS_MAX_PER_STEP = 1000  # LOG rows kept per attempt and step key; the rest counted


@dataclass(slots=True, eq=False)
class _OpenStep(Window):
    """A step's row while it is open; its progress is debounced (the `Window` fields)."""

    key: str
    row: EventRow
    attempt: _Attempt
    holders: int = 1  # step spans of this key open at once: the last one to end closes it


@dataclass(slots=True, eq=False)
class _Attempt:
    """One execution of one attempt: its open step, and the times its final row must follow."""

    scope: Scope
    execution_id: str
    trace_hex: str
    open: _OpenStep | None = None
    last_step: str | None = None
    last_close_us: int = 0
    start_us: int = 0
    # Forgotten once (evicted) and seen again: the step it may hold open is not known here.
    forgotten: bool = False
    # Told again to a new writer process: its last step row, if any, is in the database only.
    resumed: bool = False
    # LOG rows written per step key (None: between steps) and lines dropped over the cap since
    # the last dropped-count row; None until the attempt's first log line (most have none).
    logs: dict[str | None, list[int]] | None = None


def _job_columns(scope: Scope) -> tuple[str, str, str | None, int]:
    """domain, job_id, job_type, attempt: the columns every row of the attempt starts with."""
    return scope.domain, scope.job_id, scope.job_type, scope.attempt


def _closing(
    state: _Attempt, row: EventRow, ended_us: int, message: str | None
) -> tuple[int, str | None]:
    """A step close's time, never before the row's start (on every path), and its message made
    safe; the attempt's last close moves with it (its final row is never dated before)."""
    ended_us = max(ended_us, row.created_us)
    state.last_close_us = max(state.last_close_us, ended_us)
    return ended_us, None if message is None else clean_text(message)


def _progress_detail(attributes: Mapping[str, Any]) -> Detail:
    """The detail a progress event carries: its attributes, or the one JSON object it names."""
    if len(attributes) == 1 and JOB_STEP_DETAIL in attributes:
        return parse_detail(attributes[JOB_STEP_DETAIL]) or {}
    return attributes if type(attributes) is dict else dict(attributes)


class StepRecorder:
    """Applies commands in order and accumulates the row operations they imply."""

    def __init__(
        self,
        *,
        debounce_ms: float = 1000,
        clock: Callable[[], float] = time.monotonic,
        max_open_attempts: int = DEFAULT_MAX_OPEN_ATTEMPTS,
        on_evict: Callable[[Scope], None] | None = None,
        logs_max_per_step: int = DEFAULT_LOGS_MAX_PER_STEP,
    ):
        """``max_open_attempts`` bounds the attempts kept in memory (job spans started and not
        yet ended); beyond it the oldest is forgotten and ``on_evict`` called with its scope.
        A forgotten attempt's later step or job end closes whichever step it holds open."""
        if isinstance(max_open_attempts, bool) or not (
            isinstance(max_open_attempts, int) and max_open_attempts >= 1
        ):
            raise ConfigurationError(
                f"max_open_attempts must be a positive integer, got {max_open_attempts!r}"
            )
        self._debounce: Debounce[_OpenStep] = Debounce(
            window_seconds=debounce_ms / 1000.0, clock=clock
        )
        self._batch = BatchBuilder()
        self._max_attempts = max_open_attempts
        self._logs_max = logs_max_per_step
        self._last_span = (0, "")  # the span id of the latest log line, and its hex
        self._on_evict = on_evict
        # By job span (trace, span id); ordered, so the oldest goes in O(1) (a plain dict's
        # first key is found by walking the slots of every key deleted before it).
        self._attempts: OrderedDict[tuple[int, int], _Attempt] = OrderedDict()
        # Span ids of forgotten attempts, as bounded as the attempts themselves.
        self._forgotten: OrderedDict[tuple[int, int], None] = OrderedDict()
        self._handlers: dict[type, Callable[[Any], None]] = {
            JobStarted: self._job_started,
            StepStarted: self._step_started,
            ProgressReported: self._progress,
            StepEnded: self._step_ended,
            StepRan: self._step_ran,
            JobEnded: self._job_ended,
            EventRecorded: self._event,
            LogRecorded: self._log,
        }

    # -- the writer's interface ---------------------------------------------------------------

    def handle(self, command: Command) -> None:
        """Apply one command; its row operations join the pending batch."""
        self._handlers[type(command)](command)

    def resume(self, command: Command) -> None:
        """Apply a start told again to a new writer (one replacing a writer process that died),
        whose rows may be written already: a job's start only sets up its attempt (its earlier
        attempts were settled then), a step's inserts its row, a no-op if it is open (the
        open-step index), sealed so that later changes are guarded updates of the open row."""
        if type(command) is JobStarted:
            told = self._attempt(command.scope)
            told.start_us = command.start_ns // 1000
            told.resumed = True  # heartbeated at once, even between steps (its last row is found)
            return
        self.handle(command)
        if type(command) is StepStarted:
            state = self._attempts.get((command.scope.trace_id, command.scope.span_id))
            if state is not None and state.open is not None:
                self._batch.seal(state.open.row)

    def take_batch(self) -> Batch | None:
        """Hand over the pending operations (None if there are none) and start a new batch."""
        return self._batch.take()

    def pending_operations(self) -> int:
        """Operations waiting in the batch being built (the writer bounds memory with it)."""
        return self._batch.operation_count()

    def open_attempts(self) -> int:
        return len(self._attempts)

    def open_steps(self) -> list[tuple[str, str, int, str]]:
        """(domain, job_id, attempt, execution_id) of every attempt this process runs that has
        a step (or was resumed, its steps unknown here): the heartbeat finds its latest step row."""
        return [
            (s.scope.domain, s.scope.job_id, s.scope.attempt, s.execution_id)
            for s in list(self._attempts.values())
            if s.last_step is not None or s.resumed
        ]

    def next_due(self) -> float | None:
        """Clock time of the earliest trailing progress write, if any is waiting."""
        return self._debounce.next_due()

    def fire_due(self, now: float | None = None) -> None:
        """Write the trailing progress of every window that has ended by ``now``."""
        now = self._debounce.now() if now is None else now
        for step, detail in self._debounce.expired(now):
            self._write_progress(step, detail, now)

    def flush_timers(self) -> None:
        """Write every waiting trailing progress now (force_flush must not wait for windows)."""
        now = self._debounce.now()
        for step, detail in self._debounce.expired(None):
            self._write_progress(step, detail, now)

    # -- commands -----------------------------------------------------------------------------

    def _attempt(self, scope: Scope) -> _Attempt:
        key = (scope.trace_id, scope.span_id)
        state = self._attempts.get(key)
        if state is None:
            state = self._new_attempt(scope)
            if len(self._attempts) >= self._max_attempts:
                self._evict_oldest()
            self._attempts[key] = state
        return state

    def _new_attempt(self, scope: Scope) -> _Attempt:
        trace_hex = format(scope.trace_id, "032x")
        execution_id = scope.execution or f"{trace_hex}:{scope.span_id:016x}"
        forgotten = self._forgotten.pop((scope.trace_id, scope.span_id), False) is None
        return _Attempt(scope, execution_id, trace_hex, forgotten=forgotten)

    def _evict_oldest(self) -> None:
        key, state = self._attempts.popitem(last=False)
        step = state.open
        if step is not None:
            self._debounce.cancel(step)  # its trailing progress is dropped with it
            self._batch.seal(step.row)
        self._forgotten[key] = None
        if len(self._forgotten) > self._max_attempts:
            self._forgotten.popitem(last=False)
        if self._on_evict is not None:
            self._on_evict(state.scope)

    def _job_started(self, command: JobStarted) -> None:
        scope = command.scope
        state = self._attempt(scope)
        state.start_us = command.start_ns // 1000
        if scope.attempt > 1:
            self._write_pending_progress_before(scope)
            self._batch.add_abandon(
                Abandon(scope.domain, scope.job_id, scope.attempt, command.start_ns // 1000)
            )
        for name, value in command.tags:
            row = EventRow(
                *_job_columns(scope), TAG, name, None, None, value, state.trace_hex,
                format(scope.span_id, "016x"), state.execution_id, state.start_us, None,
            )  # fmt: skip
            self._batch.add_event(row)

    def _write_pending_progress_before(self, scope: Scope) -> None:
        """The job's earlier attempts are about to be abandoned: their waiting trailing progress
        is written first, as if its window had ended (however the commands are batched)."""
        now = self._debounce.now()
        job = (scope.domain, scope.job_id)
        for step in self._debounce.waiting():
            earlier = step.attempt.scope
            if earlier.attempt < scope.attempt and (earlier.domain, earlier.job_id) == job:
                detail = self._debounce.cancel(step)
                if detail is not None:
                    self._write_progress(step, detail, now)

    def _step_started(self, command: StepStarted) -> None:
        state = self._attempt(command.scope)
        key = clean_text(command.key, MAX_STEP_KEY_CHARS)
        open_step = state.open
        if open_step is not None and open_step.key == key:
            open_step.holders += 1
            return
        row = self._new_step_row(state, key, command.span_id, command.start_ns // 1000)
        state.open = _OpenStep(key, row, state)

    def _new_step_row(self, state: _Attempt, key: str, span_id: int, start_us: int) -> EventRow:
        """The row of a step that starts now (RUNNING), after closing the one open before."""
        if state.open is not None:
            self._close(state, state.open, COMPLETED, None, None, start_us)
        elif state.forgotten:
            self._close_unknown_step(state, COMPLETED, None, start_us)
        # Positional (EventRow's field order): this runs once per step on the writer thread.
        row = EventRow(
            *_job_columns(state.scope), STEP, key, RUNNING, None, None, state.trace_hex,
            format(span_id, "016x"), state.execution_id, start_us, None,
        )  # fmt: skip
        self._batch.add_step(row, state.execution_id)
        state.last_step = key
        return row

    def _step_ran(self, command: StepRan) -> None:
        """Start, progress and end at once: one row inserted closed (or folded, as always)."""
        state = self._attempt(command.scope)
        key = clean_text(command.key, MAX_STEP_KEY_CHARS)
        if state.open is not None and state.open.key == key:
            # The same step is open already: this span joins and leaves it, its progress counts.
            scope, raw_key = command.scope, command.key
            self._step_started(StepStarted(scope, raw_key, command.span_id, command.start_ns))
            if command.progress:
                self._progress(ProgressReported(scope, raw_key, command.progress))
            self._step_ended(
                StepEnded(
                    scope, raw_key, command.end_ns, command.failed, command.explicit_detail,
                    command.error,
                )
            )  # fmt: skip
            return
        row = self._new_step_row(state, key, command.span_id, command.start_ns // 1000)
        explicit = parse_detail(command.explicit_detail)
        if explicit is not None:
            row.detail = explicit
        elif command.progress:
            row.detail = _progress_detail(command.progress)
        row.step_status, message = self._end_status(state.scope, command)
        row.ended_us, row.message = _closing(state, row, command.end_ns // 1000, message)

    def _progress(self, command: ProgressReported) -> None:
        scope = command.scope
        state = self._attempts.get((scope.trace_id, scope.span_id))
        if state is None or state.open is None:
            return  # the step was closed already: a late event must not touch any row
        if state.open.key != clean_text(command.key, MAX_STEP_KEY_CHARS):
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
            self._write_progress(step, due_now, now)

    def _step_ended(self, command: StepEnded) -> None:
        scope = command.scope
        state = self._attempts.get((scope.trace_id, scope.span_id))
        key = clean_text(command.key, MAX_STEP_KEY_CHARS)
        if state is None or state.open is None or state.open.key != key:
            return  # closed already by the next step or the job's end
        step = state.open
        step.holders -= 1
        if step.holders > 0:
            return
        status, message = self._end_status(state.scope, command)
        explicit = parse_detail(command.explicit_detail)
        self._close(state, step, status, explicit, message, command.end_ns // 1000)

    def _end_status(self, scope: Scope, command: StepEnded | StepRan) -> tuple[str, str | None]:
        """A step span's end: FAILED with its error, FAILED time_limit when it ended after the
        attempt's limit, else COMPLETED."""
        late = self._is_late(scope, command.end_ns)
        status = FAILED if command.failed or late else COMPLETED
        return status, command.error if command.failed else (TIME_LIMIT if late else None)

    def _job_ended(self, command: JobEnded) -> None:
        scope = command.scope
        state = self._attempts.pop((scope.trace_id, scope.span_id), None)
        if state is None:
            state = self._attempt_for_end(scope)
        end_us = command.end_ns // 1000
        reason = self._failure_reason(command)
        status = COMPLETED if reason is None else FAILED
        failed_step = state.open.key if state.open is not None else None
        if state.open is not None:
            self._close(state, state.open, status, None, reason, end_us)
        elif state.forgotten:
            self._close_unknown_step(state, status, reason, end_us)
        detail: Detail | None = None
        if reason is not None:
            detail = {"step": failed_step or state.last_step}
            if command.error:
                detail["error"] = clean_text(command.error)
        # Never dated before the attempt's start or the step close it follows.
        created_us = max(end_us, state.last_close_us, state.start_us)
        if state.logs is not None:
            for key in list(state.logs):
                self._logs_dropped(state, key, created_us)
        self._batch.add_job_log(
            JobLogRow(*_job_columns(scope), status, reason, detail, state.trace_hex, created_us)
        )

    def _event(self, command: EventRecorded) -> None:
        scope = command.scope
        kind = clean_text(command.type, MAX_STEP_KEY_CHARS)
        detail = dict(command.detail) if command.detail else None
        message = None if command.message is None else clean_text(command.message)
        trace_id = format(scope.trace_id, "032x") if scope.trace_id else None
        span_id = format(scope.span_id, "016x") if scope.span_id else None
        created_us = command.time_ns // 1000
        row = EventRow(
            *_job_columns(scope), kind, None, None, detail, message, trace_id, span_id,
            scope.execution, created_us, None,
        )  # fmt: skip
        self._batch.add_event(row)

    def _log(self, command: LogRecorded) -> None:
        """A LOG row, within the per-step cap (lines over it are counted for one later row)."""
        scope = command.scope
        state = self._attempts.get((scope.trace_id, scope.span_id))
        key = None if command.key is None else clean_text(command.key, MAX_STEP_KEY_CHARS)
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
            *_job_columns(scope), LOG, key, None, detail, command.message, trace_id, span_id,
            execution, command.time_ns // 1000, None,
        )  # fmt: skip
        self._batch.add_event(row)

    def _span_hex(self, span_id: int) -> str:
        """A span id's hex, remembered for the next line (a step's lines share their span)."""
        if span_id != self._last_span[0]:
            self._last_span = (span_id, format(span_id, "016x"))
        return self._last_span[1]

    def _logs_dropped(self, state: _Attempt, key: str | None, at_us: int) -> None:
        """One LOG row saying how many lines of ``key`` the cap dropped since the last such row."""
        counts = state.logs.get(key) if state.logs is not None else None
        if counts is None or counts[1] == 0:
            return
        dropped, counts[1] = counts[1], 0
        scope = state.scope
        row = EventRow(
            *_job_columns(scope), LOG, key, None,
            {"severity": "WARN", "dropped": dropped, "attributes": {}},
            f"{dropped} log lines dropped (over the cap of {self._logs_max} per step)",
            state.trace_hex, format(scope.span_id, "016x"), state.execution_id, at_us, None,
        )  # fmt: skip
        self._batch.add_event(row)

    # -- helpers ------------------------------------------------------------------------------

    def _attempt_for_end(self, scope: Scope) -> _Attempt:
        return self._new_attempt(scope)

    @staticmethod
    def _is_late(scope: Scope, end_ns: int) -> bool:
        return scope.deadline_ns is not None and end_ns > scope.deadline_ns

    def _failure_reason(self, command: JobEnded) -> str | None:
        outcome = command.outcome
        if isinstance(outcome, str) and outcome and outcome != OUTCOME_COMPLETED:
            # target_deleted, or what a queue adapter knows: retry, time_limit, reclaimed...
            return clean_text(outcome, MAX_REASON_CHARS)
        if command.failed:
            error = command.error
            if isinstance(error, str) and error.split(":", 1)[0].endswith("CancelledError"):
                return CANCELLED
            return ERROR
        if self._is_late(command.scope, command.end_ns):
            return TIME_LIMIT
        return None

    def _close(
        self,
        state: _Attempt,
        step: _OpenStep,
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
            self._logs_dropped(state, step.key, ended_us)
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

    def _close_unknown_step(
        self, state: _Attempt, status: str, message: str | None, ended_us: int
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

    def _write_progress(self, step: _OpenStep, detail: Detail, now: float) -> None:
        self._debounce.written(step, now)
        if self._batch.is_unwritten(step.row):
            step.row.detail = detail
            return
        state = step.attempt
        self._batch.add_progress(step, state.scope, state.execution_id, step.key, detail)
