"""The unit of work one transaction writes: segments of row operations grouped by statement.

Within a segment every operation kind becomes one set-based statement, run in a fixed order
(updates, then inserts). That order equals command order as long as no update of a job follows
an insert of the same job; the recorder starts a new segment when one would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Abandon",
    "Batch",
    "CloseForeign",
    "CloseStep",
    "EventRow",
    "JobLogRow",
    "Progress",
    "Segment",
]

Detail = dict[str, Any]


@dataclass(slots=True)
class Abandon:
    """Close steps left open by attempts before ``attempt`` (FAILED abandoned), settle them."""

    domain: str
    job_id: str
    attempt: int
    at_us: int


@dataclass(slots=True)
class CloseForeign:
    """Close the attempt's open step if another execution owns it (FAILED abandoned)."""

    domain: str
    job_id: str
    attempt: int
    execution_id: str
    at_us: int


@dataclass(slots=True)
class CloseStep:
    """Guarded close of this execution's open step (``step_key`` None: whichever is open)."""

    domain: str
    job_id: str
    attempt: int
    execution_id: str
    step_key: str | None
    status: str
    detail: Detail | None
    message: str | None
    ended_us: int


@dataclass(slots=True)
class Progress:
    """Guarded progress write: replaces the detail of this execution's open step."""

    domain: str
    job_id: str
    attempt: int
    execution_id: str
    step_key: str
    detail: Detail


@dataclass(slots=True)
class EventRow:
    """A new ``job_event`` row: a STEP (open, or already closed when coalesced) or an event."""

    domain: str
    job_id: str
    job_type: str | None
    attempt: int
    type: str
    step_key: str | None
    step_status: str | None
    detail: Detail | None
    message: str | None
    trace_id: str | None
    span_id: str | None
    execution_id: str | None
    created_us: int
    ended_us: int | None
    segment: int = -1


@dataclass(slots=True)
class JobLogRow:
    """The attempt's final row; the first one written wins."""

    domain: str
    job_id: str
    job_type: str | None
    attempt: int
    status: str
    reason: str | None
    detail: Detail | None
    trace_id: str | None
    created_us: int


@dataclass(slots=True)
class Segment:
    """Operations that may run grouped by kind without changing what the rows say."""

    number: int
    abandons: list[Abandon] = field(default_factory=list)
    foreign_closes: list[CloseForeign] = field(default_factory=list)
    closes: list[CloseStep] = field(default_factory=list)
    progress: list[Progress] = field(default_factory=list)
    rows: list[EventRow] = field(default_factory=list)
    job_logs: list[JobLogRow] = field(default_factory=list)
    # What decides whether a later operation may still join this segment:
    touched_jobs: set[tuple[str, str]] = field(default_factory=set)
    abandon_barriers: dict[tuple[str, str], int] = field(default_factory=dict)
    step_owners: dict[tuple[str, str, int], str] = field(default_factory=dict)
    foreign_closed: set[tuple[str, str, int, str]] = field(default_factory=set)

    def operation_count(self) -> int:
        return (
            len(self.abandons)
            + len(self.foreign_closes)
            + len(self.closes)
            + len(self.progress)
            + len(self.rows)
            + len(self.job_logs)
        )


@dataclass(slots=True)
class Batch:
    """Segments written in order, in one transaction."""

    segments: list[Segment] = field(default_factory=list)

    def operation_count(self) -> int:
        return sum(segment.operation_count() for segment in self.segments)
