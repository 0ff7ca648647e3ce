"""The unit of work of one transaction: segments of row operations grouped by statement.

Each segment runs one set-based statement per kind (updates, then inserts); `BatchBuilder`
starts a new segment where that order would differ from the commands' order."""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "Abandon",
    "Batch",
    "BatchBuilder",
    "CloseForeign",
    "CloseStep",
    "EventRow",
    "FailClosedStep",
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
class FailClosedStep:
    """Guarded: the step row of ``span_id`` that a sibling step's start closed COMPLETED, and
    whose own span then ended in error, becomes FAILED with that error, dated at that end.
    Never a row its own end closed, nor one settled FAILED (abandoned) since."""

    domain: str
    job_id: str
    attempt: int
    execution_id: str
    span_id: str
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
    # the job span's resource: service.name, service.version, host.name, service.instance.id
    service_name: str | None = None
    service_version: str | None = None
    host_name: str | None = None
    service_instance_id: str | None = None


@dataclass(slots=True)
class Segment:
    """Operations that may run grouped by kind without changing what the rows say."""

    number: int
    abandons: list[Abandon] = field(default_factory=list)
    foreign_closes: list[CloseForeign] = field(default_factory=list)
    closes: list[CloseStep] = field(default_factory=list)
    progress: list[Progress] = field(default_factory=list)
    rows: list[EventRow] = field(default_factory=list)
    # after the rows: the row and the sibling that closed it may be in this segment's rows
    sibling_failures: list[FailClosedStep] = field(default_factory=list)
    job_logs: list[JobLogRow] = field(default_factory=list)

    def operation_count(self) -> int:
        return (
            len(self.abandons)
            + len(self.foreign_closes)
            + len(self.closes)
            + len(self.progress)
            + len(self.rows)
            + len(self.sibling_failures)
            + len(self.job_logs)
        )


@dataclass(slots=True)
class Batch:
    """Segments written in order, in one transaction."""

    segments: list[Segment] = field(default_factory=list)

    def operation_count(self) -> int:
        return sum(segment.operation_count() for segment in self.segments)


class _AttemptKey(Protocol):
    """What every operation names: the attempt it belongs to."""

    @property
    def domain(self) -> str: ...
    @property
    def job_id(self) -> str: ...
    @property
    def attempt(self) -> int: ...


class BatchBuilder:
    """Builds the pending batch: each operation joins the segment it may join without
    reordering writes; rows still unwritten are named (later changes fold into them)."""

    def __init__(self) -> None:
        self._numbers = itertools.count()
        self._batch = Batch()
        self._segment: Segment | None = None
        # What decides whether a later operation may still join the current segment (stale
        # while there is none: the next segment clears it; cleared, not rebuilt: it is cheaper).
        self._touched_jobs: set[tuple[str, str]] = set()
        self._abandon_barriers: dict[tuple[str, str], int] = {}
        self._step_owners: dict[tuple[str, str, int], str] = {}
        self._foreign_closed: set[tuple[str, str, int, str]] = set()
        # Its progress writes, by the step they are for: a later snapshot replaces the detail.
        self._progress: dict[Hashable, Progress] = {}

    def take(self) -> Batch | None:
        """Hand over the batch (None if it holds no segment) and start a new one."""
        batch = self._batch
        self._batch = Batch()
        self._segment = None
        return batch if batch.segments else None

    def operation_count(self) -> int:
        return self._batch.operation_count()

    def is_unwritten(self, row: EventRow) -> bool:
        """The row is in the segment being built: later operations on it fold into the row
        (an update in its own segment would run before its insert)."""
        segment = self._segment
        return segment is not None and segment.number == row.segment

    def seal(self, row: EventRow) -> None:
        """Operations on ``row`` can no longer fold into it: later ones start a new segment
        if it is in the current one (closes must not run before its insert)."""
        if self.is_unwritten(row):
            self._new_segment()

    def add_abandon(self, abandon: Abandon) -> None:
        """Settle the job's earlier attempts, after anything already queued for the job."""
        job = (abandon.domain, abandon.job_id)
        split = self._segment is not None and job in self._touched_jobs
        self._segment_for(abandon, split=split).abandons.append(abandon)
        self._abandon_barriers[job] = abandon.attempt

    def add_step(self, row: EventRow, execution_id: str) -> None:
        """A new step row, after closing the attempt's step another execution holds open (one
        such close per execution and segment)."""
        segment = self._segment_for(row, execution_id)
        foreign = (row.domain, row.job_id, row.attempt, execution_id)
        if foreign not in self._foreign_closed:
            segment.foreign_closes.append(CloseForeign(*foreign, at_us=row.created_us))
            self._foreign_closed.add(foreign)
        row.segment = segment.number
        segment.rows.append(row)

    def add_event(self, row: EventRow) -> None:
        segment = self._segment_for(row)
        row.segment = segment.number
        segment.rows.append(row)

    def add_close(self, close: CloseStep) -> None:
        self._segment_for(close, close.execution_id).closes.append(close)

    def add_sibling_failure(self, failure: FailClosedStep) -> None:
        self._segment_for(failure, failure.execution_id).sibling_failures.append(failure)

    def add_job_log(self, row: JobLogRow) -> None:
        self._segment_for(row).job_logs.append(row)

    def add_progress(
        self, step: Hashable, key: _AttemptKey, execution_id: str, step_key: str, detail: Detail
    ) -> None:
        """Progress of ``step``: replaces its progress write if that is still unwritten."""
        op = self._progress.get(step) if self._segment is not None else None
        if op is not None:
            op.detail = detail
            return
        op = Progress(key.domain, key.job_id, key.attempt, execution_id, step_key, detail)
        self._segment_for(op, execution_id).progress.append(op)
        self._progress[step] = op

    def _new_segment(self) -> Segment:
        self._segment = segment = Segment(next(self._numbers))
        self._batch.segments.append(segment)
        self._touched_jobs.clear()
        self._abandon_barriers.clear()
        self._step_owners.clear()
        self._foreign_closed.clear()
        self._progress.clear()
        return segment

    def _segment_for(
        self, key: _AttemptKey, execution_id: str | None = None, *, split: bool = False
    ) -> Segment:
        """The segment an operation of this attempt may join without reordering writes.

        A new one after an abandon of the attempt, or when another execution touches its steps.
        """
        segment = self._segment
        if split or segment is None:
            segment = self._new_segment()
        job = (key.domain, key.job_id)
        attempt = (key.domain, key.job_id, key.attempt)
        if key.attempt < self._abandon_barriers.get(job, 0) or (
            execution_id is not None
            and self._step_owners.setdefault(attempt, execution_id) != execution_id
        ):
            segment = self._new_segment()
            if execution_id is not None:
                self._step_owners[attempt] = execution_id
        self._touched_jobs.add(job)
        return segment
