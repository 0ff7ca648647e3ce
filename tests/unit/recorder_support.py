"""Helpers for driving the recorder with hand-made commands and reading its batches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from otel_jobsteps._core.commands import (
    JobEnded,
    JobStarted,
    ProgressReported,
    Scope,
    StepEnded,
    StepSkipped,
    StepStarted,
)
from otel_jobsteps._core.recorder import StepRecorder
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
        self.recorder.handle(ProgressReported(self.scope, key, detail))

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
    st.tuples(st.just("skip"), st.integers(0, 3), skew, st.sampled_from("ABC")),
    st.tuples(st.just("job_end"), st.integers(0, 3), skew, st.booleans()),
)


def script_commands(script: list[tuple[Any, ...]]) -> list[Any]:
    """Commands of a script; a step's end names the span of the latest start of its key (so a
    failing end of a step a sibling closed is in the scripts too)."""
    commands: list[Any] = []
    spans: dict[tuple[int, str], int] = {}
    for t, (kind, who, skew_ms, *args) in enumerate(script, start=1):
        scope, at = SCOPES[who], (1000 + t * 10 + skew_ms) * MS
        if kind == "job_start":
            commands.append(JobStarted(scope, at))
        elif kind == "start":
            spans[who, args[0]] = 1000 + t
            commands.append(StepStarted(scope, args[0], 1000 + t, at))
        elif kind == "progress":
            detail = {"n": args[1]}
            commands.append(ProgressReported(scope, args[0], detail))
        elif kind == "end":
            span_id = spans.get((who, args[0]), 0)
            error = "E" if args[1] else None
            commands.append(StepEnded(scope, args[0], at, args[1], None, error, span_id))
        elif kind == "skip":
            commands.append(StepSkipped(scope, args[0], 1000 + t, at, at + 5 * MS, None))
        else:
            commands.append(JobEnded(scope, at, args[0], None, "E" if args[0] else None))
    return commands
