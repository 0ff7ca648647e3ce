"""The sequential step model: the translation's commands -> row operations in a `Batch`.

Pure logic with an injectable clock. The attempt rules live here (abandon, job end); the step
rules in `_core.steps`, the bound on open attempts in `_core.attempts`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .attempts import DEFAULT_MAX_OPEN_ATTEMPTS, Attempt, Attempts, OpenStep
from .batch import Abandon, Batch, BatchBuilder, Detail, EventRow, JobLogRow
from .commands import Command, EventRecorded, JobEnded, JobStarted, Scope, StepStarted
from .debounce import Debounce
from .detail import clean_text
from .steps import MAX_STEP_KEY_CHARS, StepRows, is_late
from .vocabulary import (
    CANCELLED,
    COMPLETED,
    ERROR,
    EVENT_NAMED_STEP,
    FAILED,
    OUTCOME_COMPLETED,
    STEP,
    TAG,
    TIME_LIMIT,
)

__all__ = ["DEFAULT_LOGS_MAX_PER_STEP", "DEFAULT_MAX_OPEN_ATTEMPTS", "StepRecorder"]

MAX_REASON_CHARS = 64
DEFAULT_LOGS_MAX_PER_STEP = 1000  # LOG rows kept per attempt and step key; the rest counted


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
        """``max_open_attempts`` bounds the attempts kept in memory; beyond it the oldest is
        forgotten and ``on_evict`` called with its scope."""
        self._attempts = Attempts(max_open_attempts, self._forget)
        self._debounce: Debounce[OpenStep] = Debounce(
            window_seconds=debounce_ms / 1000.0, clock=clock
        )
        self._batch = BatchBuilder()
        self._on_evict = on_evict
        self._steps = StepRows(
            self._attempts, self._batch, self._debounce, logs_max_per_step=logs_max_per_step
        )
        self._handlers: dict[type, Callable[[Any], None]] = {
            JobStarted: self._job_started,
            JobEnded: self._job_ended,
            EventRecorded: self._event,
            **self._steps.handlers(),
        }

    # -- the writer's interface ---------------------------------------------------------------

    def handle(self, command: Command) -> None:
        """Apply one command; its row operations join the pending batch."""
        self._handlers[type(command)](command)

    def resume(self, command: Command) -> None:
        """Apply a start told again to a new writer process, whose rows may be written already:
        a job's start only sets up its attempt, a step's open row is sealed (later: updates)."""
        if type(command) is JobStarted:
            told = self._attempts.open(command.scope)
            told.start_us = command.start_ns // 1000
            told.resumed = True  # heartbeated at once, even between steps (its last row is found)
            return
        self.handle(command)
        if type(command) is StepStarted:
            state = self._attempts.get(command.scope)
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

    def held_attempts(self) -> list[tuple[tuple[int, int], Attempt]] | None:
        """The open attempts by job span, for a derivation state; None once one was forgotten."""
        return self._attempts.held()

    def adopt_attempt(self, key: tuple[int, int], attempt: Attempt) -> None:
        """Take back an attempt a derivation state kept (its rows are written already)."""
        self._attempts.adopt(key, attempt)

    def open_steps(self) -> list[tuple[str, str, int, str]]:
        """(domain, job_id, attempt, execution_id) of every attempt this process runs that has
        a step (or was resumed, its steps unknown here): the heartbeat finds its latest step row."""
        return [
            (s.scope.domain, s.scope.job_id, s.scope.attempt, s.execution_id)
            for s in self._attempts.all()
            if s.last_step is not None or s.resumed
        ]

    def next_due(self) -> float | None:
        """Clock time of the earliest trailing progress write, if any is waiting."""
        return self._debounce.next_due()

    def fire_due(self, now: float | None = None) -> None:
        """Write the trailing progress of every window that has ended by ``now``."""
        now = self._debounce.now() if now is None else now
        for step, detail in self._debounce.expired(now):
            self._steps.write_progress(step, detail, now)

    def flush_timers(self) -> None:
        """Write every waiting trailing progress now (force_flush must not wait for windows)."""
        now = self._debounce.now()
        for step, detail in self._debounce.expired(None):
            self._steps.write_progress(step, detail, now)

    # -- attempts -----------------------------------------------------------------------------

    def _forget(self, state: Attempt) -> None:
        """An attempt evicted: its trailing progress is dropped, its row sealed."""
        step = state.open
        if step is not None:
            self._debounce.cancel(step)
            self._batch.seal(step.row)
        if self._on_evict is not None:
            self._on_evict(state.scope)

    def _job_started(self, command: JobStarted) -> None:
        scope = command.scope
        state = self._attempts.open(scope)
        state.start_us = command.start_ns // 1000
        if scope.attempt > 1:
            self._write_pending_progress_before(scope)
            self._batch.add_abandon(
                Abandon(scope.domain, scope.job_id, scope.attempt, command.start_ns // 1000)
            )
        for name, value in command.tags:
            row = EventRow(
                *scope[:4], TAG, name, None, None, value, state.trace_hex,
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
                    self._steps.write_progress(step, detail, now)

    def _job_ended(self, command: JobEnded) -> None:
        scope = command.scope
        state = self._attempts.pop(scope)
        end_us = command.end_ns // 1000
        reason = self._failure_reason(command)
        status = COMPLETED if reason is None else FAILED
        failed_step = state.open.key if state.open is not None else None
        if state.open is not None:
            self._steps.close(state, state.open, status, None, reason, end_us)
        elif state.forgotten:
            self._steps.close_unknown_step(state, status, reason, end_us)
        detail: Detail | None = None
        if reason is not None:
            detail = {"step": failed_step or state.last_step}
            if command.error:
                detail["error"] = clean_text(command.error)
        # Never dated before the attempt's start or the step close it follows.
        created_us = max(end_us, state.last_close_us, state.start_us)
        if state.logs is not None:
            for key in list(state.logs):
                self._steps.logs_dropped(state, key, created_us)
        columns = (*scope[:4], status, reason, detail, state.trace_hex, created_us)
        self._batch.add_job_log(JobLogRow(*columns, *command.resource))

    def _event(self, command: EventRecorded) -> None:
        scope = command.scope
        kind = clean_text(command.type, MAX_STEP_KEY_CHARS)
        if kind == STEP:  # a row of that type is a step to every reader: this one is not
            kind = EVENT_NAMED_STEP
        detail = dict(command.detail) if command.detail else None
        message = None if command.message is None else clean_text(command.message)
        trace_id = format(scope.trace_id, "032x") if scope.trace_id else None
        span_id = format(scope.span_id, "016x") if scope.span_id else None
        created_us = command.time_ns // 1000
        row = EventRow(
            *scope[:4], kind, None, None, detail, message, trace_id, span_id,
            scope.execution, created_us, None,
        )  # fmt: skip
        self._batch.add_event(row)

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
        if is_late(command.scope, command.end_ns):
            return TIME_LIMIT
        return None
