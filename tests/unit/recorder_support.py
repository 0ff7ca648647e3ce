"""Helpers for driving the recorder with hand-made commands and reading its batches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from otel_jobsteps.recorder import (
    JobEnded,
    JobStarted,
    ProgressReported,
    Scope,
    StepEnded,
    StepRecorder,
    StepStarted,
)
from otel_jobsteps.testing import apply, operations

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


written = operations  # (statement, operation) pairs in the order the store executes them


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


settle = apply  # the final rows, as the SQL leaves them, however the operations were batched
