"""The sequential step model and the progress debounce, as pure logic with an injectable clock.

The recorder runs on the writer thread. It turns span facts (commands) into row operations in
a `Batch`: one open step per attempt and execution, a new step closes the previous one, the same
step reuses its row, progress is debounced, and a job's end closes its step before its log row.
Operations on a row that is still unwritten are folded into that row, so a step opened,
updated and closed within one batch costs one insert. Impossible times follow one rule: a step
never ends before it starts, and an attempt's final row is never dated before its start or
its last step close. At most ``max_open_attempts`` attempts are kept: beyond that the oldest
is forgotten (job spans that never end must not grow memory without bound).
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from .attributes import JOB_STEP_DETAIL
from .batch import (
    Abandon,
    Batch,
    CloseForeign,
    CloseStep,
    Detail,
    EventRow,
    JobLogRow,
    Progress,
    Segment,
)
from .detail import clean_text, parse_detail
from .errors import ConfigurationError

__all__ = [
    "EventRecorded",
    "JobEnded",
    "JobStarted",
    "ProgressReported",
    "Scope",
    "StepEnded",
    "StepRecorder",
    "StepStarted",
]

STEP = "STEP"
RUNNING = "RUNNING"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
ABANDONED = "abandoned"
TIME_LIMIT = "time_limit"
MAX_STEP_KEY_CHARS = 256
MAX_REASON_CHARS = 64
COMPLETED_OUTCOME = "completed"
DEFAULT_MAX_OPEN_ATTEMPTS = 10_000


class Scope(NamedTuple):
    """One execution of one attempt of a job, as the job span declared it."""

    domain: str
    job_id: str
    job_type: str | None
    attempt: int
    execution: str | None
    trace_id: int
    span_id: int
    deadline_ns: int | None


class JobStarted(NamedTuple):
    scope: Scope
    start_ns: int


class StepStarted(NamedTuple):
    scope: Scope
    key: str
    span_id: int
    start_ns: int


class ProgressReported(NamedTuple):
    scope: Scope
    key: str
    latest: Callable[[], Mapping[str, Any]]  # the step's newest progress detail, read when handled


class StepEnded(NamedTuple):
    scope: Scope
    key: str
    end_ns: int
    failed: bool
    explicit_detail: object
    error: str | None


class JobEnded(NamedTuple):
    scope: Scope
    end_ns: int
    failed: bool
    outcome: object
    error: str | None


class EventRecorded(NamedTuple):
    scope: Scope
    type: str
    message: str | None
    detail: Mapping[str, Any] | None
    time_ns: int


Command = JobStarted | StepStarted | ProgressReported | StepEnded | JobEnded | EventRecorded


@dataclass(slots=True, eq=False)
class _OpenStep:
    key: str
    row: EventRow
    attempt: _Attempt
    holders: int = 1
    last_write: float | None = None
    pending_detail: Detail | None = None
    due: float | None = None
    closed: bool = False
    progress_op: Progress | None = None
    progress_segment: int = -1


@dataclass(slots=True, eq=False)
class _Attempt:
    scope: Scope
    execution_id: str
    trace_hex: str
    open: _OpenStep | None = None
    last_step: str | None = None
    last_close_us: int = 0
    start_us: int = 0
    # Forgotten once (evicted) and seen again: the step it may hold open is not known here.
    forgotten: bool = False


class StepRecorder:
    """Applies commands in order and accumulates the row operations they imply."""

    def __init__(
        self,
        *,
        debounce_ms: float = 1000,
        clock: Callable[[], float] = time.monotonic,
        max_open_attempts: int = DEFAULT_MAX_OPEN_ATTEMPTS,
        on_evict: Callable[[Scope], None] | None = None,
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
        self._debounce = debounce_ms / 1000.0
        self._clock = clock
        self._max_attempts = max_open_attempts
        self._on_evict = on_evict
        self._attempts: dict[int, _Attempt] = {}
        # Span ids of forgotten attempts, as bounded as the attempts themselves.
        self._forgotten: dict[int, None] = {}
        self._timers: list[tuple[float, int, _OpenStep]] = []
        self._timer_seq = itertools.count()
        self._segment_numbers = itertools.count()
        self._batch = Batch()
        self._segment: Segment | None = None
        self._handlers: dict[type, Callable[[Any], None]] = {
            JobStarted: self._job_started,
            StepStarted: self._step_started,
            ProgressReported: self._progress,
            StepEnded: self._step_ended,
            JobEnded: self._job_ended,
            EventRecorded: self._event,
        }

    # -- the writer's interface ---------------------------------------------------------------

    def handle(self, command: Command) -> None:
        """Apply one command; its row operations join the pending batch."""
        self._handlers[type(command)](command)

    def take_batch(self) -> Batch | None:
        """Hand over the pending operations (None if there are none) and start a new batch."""
        batch = self._batch
        self._batch = Batch()
        self._segment = None
        return batch if batch.segments else None

    def pending_operations(self) -> int:
        """Operations waiting in the batch being built (the writer bounds memory with it)."""
        return self._batch.operation_count()

    def open_attempts(self) -> int:
        return len(self._attempts)

    def open_steps(self) -> list[tuple[str, str, int, str]]:
        """(domain, job_id, attempt, execution_id) of every attempt this process runs that has
        a step: the heartbeat keeps it alive for sweep, on an open step or between steps."""
        return [
            (s.scope.domain, s.scope.job_id, s.scope.attempt, s.execution_id)
            for s in list(self._attempts.values())
            if s.last_step is not None
        ]

    def next_due(self) -> float | None:
        """Clock time of the earliest trailing progress write, if any is waiting."""
        timers = self._timers
        while timers and timers[0][2].due != timers[0][0]:
            heapq.heappop(timers)
        return timers[0][0] if timers else None

    def fire_due(self, now: float | None = None) -> None:
        """Write the trailing progress of every window that has ended by ``now``."""
        now = self._clock() if now is None else now
        timers = self._timers
        while timers and timers[0][0] <= now:
            due, _, step = heapq.heappop(timers)
            if step.due == due:
                self._write_trailing(step, now)

    def flush_timers(self) -> None:
        """Write every waiting trailing progress now (force_flush must not wait for windows)."""
        now = self._clock()
        while self._timers:
            due, _, step = heapq.heappop(self._timers)
            if step.due == due:
                self._write_trailing(step, now)

    # -- commands -----------------------------------------------------------------------------

    def _attempt(self, scope: Scope) -> _Attempt:
        state = self._attempts.get(scope.span_id)
        if state is None:
            state = self._new_attempt(scope)
            if len(self._attempts) >= self._max_attempts:
                self._evict_oldest()
            self._attempts[scope.span_id] = state
        return state

    def _new_attempt(self, scope: Scope) -> _Attempt:
        trace_hex = format(scope.trace_id, "032x")
        execution_id = scope.execution or f"{trace_hex}:{scope.span_id:016x}"
        forgotten = scope.span_id in self._forgotten
        if forgotten:
            del self._forgotten[scope.span_id]
        return _Attempt(scope, execution_id, trace_hex, forgotten=forgotten)

    def _evict_oldest(self) -> None:
        span_id, state = next(iter(self._attempts.items()))
        del self._attempts[span_id]
        step = state.open
        if step is not None:
            step.due = None  # its trailing progress is dropped with it
            step.closed = True
            if self._is_current(step.row.segment):
                # A later close of this row must not run before its insert (closes go first).
                self._new_segment()
        self._forgotten[span_id] = None
        if len(self._forgotten) > self._max_attempts:
            del self._forgotten[next(iter(self._forgotten))]
        if self._on_evict is not None:
            self._on_evict(state.scope)

    def _job_started(self, command: JobStarted) -> None:
        scope = command.scope
        self._attempt(scope).start_us = command.start_ns // 1000
        if scope.attempt > 1:
            self._write_pending_progress_before(scope)
            job = (scope.domain, scope.job_id)
            # Closing earlier attempts must not overtake anything already queued for the job.
            segment = self._segment_for(scope, split=job in self._current_segment().touched_jobs)
            segment.abandons.append(
                Abandon(scope.domain, scope.job_id, scope.attempt, command.start_ns // 1000)
            )
            segment.abandon_barriers[job] = scope.attempt

    def _write_pending_progress_before(self, scope: Scope) -> None:
        """The job's earlier attempts are about to be abandoned: their waiting trailing progress
        is written first, as if its window had ended (however the commands are batched)."""
        now = self._clock()
        for due, _, step in list(self._timers):
            earlier = step.attempt.scope
            if (
                step.due == due
                and earlier.attempt < scope.attempt
                and (earlier.domain, earlier.job_id) == (scope.domain, scope.job_id)
            ):
                self._write_trailing(step, now)

    def _step_started(self, command: StepStarted) -> None:
        state = self._attempt(command.scope)
        key = clean_text(command.key, MAX_STEP_KEY_CHARS)
        open_step = state.open
        if open_step is not None:
            if open_step.key == key:
                open_step.holders += 1
                return
            self._close(state, open_step, COMPLETED, None, None, command.start_ns // 1000)
        elif state.forgotten:
            self._close_unknown_step(state, COMPLETED, None, command.start_ns // 1000)
        scope = state.scope
        segment = self._segment_for(scope, state.execution_id)
        foreign = (scope.domain, scope.job_id, scope.attempt, state.execution_id)
        if foreign not in segment.foreign_closed:
            segment.foreign_closes.append(CloseForeign(*foreign, at_us=command.start_ns // 1000))
            segment.foreign_closed.add(foreign)
        # Positional (EventRow's field order): this runs once per step on the writer thread.
        row = EventRow(
            scope.domain, scope.job_id, scope.job_type, scope.attempt, STEP, key, RUNNING,
            None, None, state.trace_hex, format(command.span_id, "016x"), state.execution_id,
            command.start_ns // 1000, None, segment.number,
        )  # fmt: skip
        segment.rows.append(row)
        state.open = _OpenStep(key, row, state)
        state.last_step = key

    def _progress(self, command: ProgressReported) -> None:
        state = self._attempts.get(command.scope.span_id)
        if state is None or state.open is None or state.open.key != command.key:
            return  # the step was closed already: a late event must not touch any row
        step = state.open
        attributes = command.latest()
        if len(attributes) == 1 and JOB_STEP_DETAIL in attributes:  # a whole JSON object
            detail = parse_detail(attributes[JOB_STEP_DETAIL]) or {}
        else:
            detail = attributes if type(attributes) is dict else dict(attributes)
        now = self._clock()
        if self._is_current(step.row.segment):
            # The row itself is not written yet: it carries the latest detail, no timer needed.
            step.row.detail = detail
            if step.last_write is None:
                step.last_write = now
            return
        if step.last_write is None or now - step.last_write >= self._debounce:
            step.pending_detail = None
            step.due = None
            self._write_progress(state, step, detail, now)
            return
        step.pending_detail = detail
        if step.due is None:
            step.due = step.last_write + self._debounce
            heapq.heappush(self._timers, (step.due, next(self._timer_seq), step))

    def _step_ended(self, command: StepEnded) -> None:
        state = self._attempts.get(command.scope.span_id)
        key = clean_text(command.key, MAX_STEP_KEY_CHARS)
        if state is None or state.open is None or state.open.key != key:
            return  # closed already by the next step or the job's end
        step = state.open
        step.holders -= 1
        if step.holders > 0:
            return
        late = self._is_late(state.scope, command.end_ns)
        status = FAILED if command.failed or late else COMPLETED
        message = command.error if command.failed else (TIME_LIMIT if late else None)
        explicit = parse_detail(command.explicit_detail)
        self._close(state, step, status, explicit, message, command.end_ns // 1000)

    def _job_ended(self, command: JobEnded) -> None:
        scope = command.scope
        state = self._attempts.pop(scope.span_id, None) or self._attempt_for_end(scope)
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
        segment = self._segment_for(scope)
        segment.job_logs.append(
            JobLogRow(
                domain=scope.domain,
                job_id=scope.job_id,
                job_type=scope.job_type,
                attempt=scope.attempt,
                status=status,
                reason=reason,
                detail=detail,
                trace_id=state.trace_hex,
                # Never dated before the attempt's start or the step close it follows.
                created_us=max(end_us, state.last_close_us, state.start_us),
            )
        )

    def _event(self, command: EventRecorded) -> None:
        scope = command.scope
        segment = self._segment_for(scope)
        segment.rows.append(
            EventRow(
                domain=scope.domain,
                job_id=scope.job_id,
                job_type=scope.job_type,
                attempt=scope.attempt,
                type=clean_text(command.type, MAX_STEP_KEY_CHARS),
                step_key=None,
                step_status=None,
                detail=dict(command.detail) if command.detail else None,
                message=None if command.message is None else clean_text(command.message),
                trace_id=format(scope.trace_id, "032x") if scope.trace_id else None,
                span_id=format(scope.span_id, "016x") if scope.span_id else None,
                execution_id=scope.execution,
                created_us=command.time_ns // 1000,
                ended_us=None,
                segment=segment.number,
            )
        )

    # -- helpers ------------------------------------------------------------------------------

    def _attempt_for_end(self, scope: Scope) -> _Attempt:
        return self._new_attempt(scope)

    @staticmethod
    def _is_late(scope: Scope, end_ns: int) -> bool:
        return scope.deadline_ns is not None and end_ns > scope.deadline_ns

    def _failure_reason(self, command: JobEnded) -> str | None:
        outcome = command.outcome
        if isinstance(outcome, str) and outcome and outcome != COMPLETED_OUTCOME:
            # target_deleted, or what a queue adapter knows: retry, time_limit, reclaimed...
            return clean_text(outcome, MAX_REASON_CHARS)
        if command.failed:
            error = command.error
            if isinstance(error, str) and error.split(":", 1)[0].endswith("CancelledError"):
                return "cancelled"
            return "error"
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
        ended_us = max(ended_us, step.row.created_us)  # never before its start, on every path
        # Cancel the trailing write first: its detail rides with the close instead.
        step.due = None
        step.closed = True
        detail = explicit if explicit is not None else step.pending_detail
        step.pending_detail = None
        state.open = None
        state.last_close_us = max(state.last_close_us, ended_us)
        message = None if message is None else clean_text(message)
        row = step.row
        if self._is_current(row.segment):
            row.step_status = status
            row.ended_us = ended_us
            if detail is not None:
                row.detail = detail
            row.message = message
            return
        scope = state.scope
        self._segment_for(scope, state.execution_id).closes.append(
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
        self._segment_for(scope, state.execution_id).closes.append(close)

    def _write_progress(self, state: _Attempt, step: _OpenStep, detail: Detail, now: float) -> None:
        step.last_write = now
        if self._is_current(step.row.segment):
            step.row.detail = detail
            return
        op = step.progress_op
        if op is not None and self._is_current(step.progress_segment):
            op.detail = detail  # still unwritten: the latest snapshot replaces it
            return
        scope = state.scope
        op = Progress(
            scope.domain, scope.job_id, scope.attempt, state.execution_id, step.key, detail
        )
        segment = self._segment_for(scope, state.execution_id)
        segment.progress.append(op)
        step.progress_op = op
        step.progress_segment = segment.number

    def _write_trailing(self, step: _OpenStep, now: float) -> None:
        step.due = None
        detail = step.pending_detail
        step.pending_detail = None
        if detail is not None and not step.closed:
            self._write_progress(step.attempt, step, detail, now)

    def _is_current(self, segment_number: int) -> bool:
        return self._segment is not None and self._segment.number == segment_number

    def _current_segment(self) -> Segment:
        if self._segment is None:
            return self._new_segment()
        return self._segment

    def _new_segment(self) -> Segment:
        self._segment = Segment(next(self._segment_numbers))
        self._batch.segments.append(self._segment)
        return self._segment

    def _segment_for(
        self, scope: Scope, execution_id: str | None = None, *, split: bool = False
    ) -> Segment:
        """The segment an operation of this attempt may join without reordering writes.

        Statements run grouped by kind, which keeps command order only while (1) no operation
        on an attempt follows an abandon of that attempt and (2) the steps of an attempt are
        touched by one execution; otherwise the operation starts a new segment.
        """
        segment = self._new_segment() if split else self._current_segment()
        job = (scope.domain, scope.job_id)
        attempt = (scope.domain, scope.job_id, scope.attempt)
        if scope.attempt < segment.abandon_barriers.get(job, 0) or (
            execution_id is not None
            and segment.step_owners.setdefault(attempt, execution_id) != execution_id
        ):
            segment = self._new_segment()
            if execution_id is not None:
                segment.step_owners[attempt] = execution_id
        segment.touched_jobs.add(job)
        return segment
