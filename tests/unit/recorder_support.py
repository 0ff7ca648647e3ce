"""Helpers for driving the recorder with hand-made commands and reading its batches."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from otel_jobsteps.batch import Abandon, Batch, CloseForeign, CloseStep, EventRow, Progress
from otel_jobsteps.recorder import (
    JobEnded,
    JobStarted,
    ProgressReported,
    Scope,
    StepEnded,
    StepRecorder,
    StepStarted,
)
from otel_jobsteps.store import _STATEMENTS

MS = 1_000_000  # nanoseconds


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def scope(attempt: int = 1, *, span_id: int = 0xA1, deadline_ns: int | None = None) -> Scope:
    return Scope("render", "42", "thumbnail", attempt, None, 0xBEEF, span_id, deadline_ns)


def written(batch: Batch | None) -> list[tuple[str, Any]]:
    """(statement, operation) pairs in the order the store executes them."""
    if batch is None:
        return []
    return [
        (name, op)
        for segment in batch.segments
        for name, attr in _STATEMENTS
        for op in getattr(segment, attr)
    ]


@dataclass
class Driver:
    """Sends commands for one attempt, with span times in milliseconds."""

    recorder: StepRecorder
    scope: Scope
    next_span: int = 0x100

    def start_job(self, at_ms: int = 0) -> None:
        self.recorder.handle(JobStarted(self.scope, at_ms * MS))

    def start(self, key: str, at_ms: int) -> None:
        self.next_span += 1
        self.recorder.handle(StepStarted(self.scope, key, self.next_span, at_ms * MS))

    def progress(self, key: str, **detail: Any) -> None:
        self.recorder.handle(ProgressReported(self.scope, key, lambda: detail))

    def end(
        self,
        key: str,
        at_ms: int,
        *,
        failed: bool = False,
        explicit: object = None,
        error: str | None = None,
    ) -> None:
        self.recorder.handle(StepEnded(self.scope, key, at_ms * MS, failed, explicit, error))

    def end_job(
        self, at_ms: int, *, failed: bool = False, outcome: object = None, error: str | None = None
    ) -> None:
        self.recorder.handle(JobEnded(self.scope, at_ms * MS, failed, outcome, error))


def settle(ops: list[tuple[str, Any]]) -> list[EventRow]:
    """Apply operations the way the SQL does (guards included) and return the final rows.

    A close's time is kept at or after its row's start, as every statement does.
    """
    rows: list[EventRow] = []

    def open_rows(domain: str, job_id: str) -> list[EventRow]:
        return [
            r
            for r in rows
            if r.type == "STEP" and r.ended_us is None and (r.domain, r.job_id) == (domain, job_id)
        ]

    for _, op in ops:
        if isinstance(op, EventRow):
            rows.append(replace(op))
        elif isinstance(op, (CloseStep, Progress)):
            for row in open_rows(op.domain, op.job_id):
                if (row.attempt, row.execution_id) != (op.attempt, op.execution_id) or (
                    op.step_key is not None and row.step_key != op.step_key
                ):
                    continue
                if isinstance(op, Progress):
                    row.detail = op.detail
                    continue
                row.step_status, row.message = op.status, op.message
                row.ended_us = max(row.created_us, op.ended_us)
                row.detail = op.detail if op.detail is not None else row.detail
        elif isinstance(op, (CloseForeign, Abandon)):
            for row in open_rows(op.domain, op.job_id):
                foreign = isinstance(op, CloseForeign) and (
                    row.attempt == op.attempt and row.execution_id != op.execution_id
                )
                earlier = isinstance(op, Abandon) and row.attempt < op.attempt
                if foreign or earlier:
                    row.step_status, row.message = "FAILED", "abandoned"
                    row.ended_us = max(row.created_us, op.at_us)
    return rows
