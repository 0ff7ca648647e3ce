"""Testing without a database: an in-memory store that keeps the rows the SQL would keep.

``JobStepsProcessor(store=InMemoryStore())`` runs the whole bridge (hooks, translation, model,
batching, the writer thread) and applies each batch to in-memory tables with the statements'
own rules: the writer's statement order, ``ended_at IS NULL`` and the owning execution on every
guarded write, times never before a row's start, one open step per attempt, the first final
row of an attempt wins, and a later attempt settles the earlier ones. Job code's unit tests (and
ours) read the rows back with `InMemoryStore.steps` and `InMemoryStore.job_logs`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ._core.batch import (
    Abandon,
    Batch,
    CloseForeign,
    CloseStep,
    EventRow,
    FailClosedStep,
    JobLogRow,
    Progress,
)
from ._core.detail import encode_detail
from ._core.vocabulary import ABANDONED, COMPLETED, FAILED, SKIPPED, STEP
from ._pg.store import statements
from ._telemetry.metrics import Committed

__all__ = ["InMemoryStore", "apply", "operations"]

Operation = Abandon | CloseForeign | CloseStep | FailClosedStep | Progress | EventRow | JobLogRow


def operations(batch: Batch | None) -> list[tuple[str, Operation]]:
    """(statement, operation) pairs of a batch in the order the store executes them."""
    if batch is None:
        return []
    return [(name, op) for name, ops in statements(batch) for op in ops]


def apply(
    operations: Iterable[tuple[str, Any]],
    events: list[EventRow] | None = None,
    logs: list[JobLogRow] | None = None,
) -> list[EventRow]:
    """Apply operations to ``events`` and ``logs`` (new lists if None) as the SQL does; returns
    the ``job_event`` rows."""
    events = [] if events is None else events
    logs = [] if logs is None else logs
    for _, op in operations:
        if isinstance(op, (EventRow, JobLogRow, CloseStep, Progress)) and op.detail is not None:
            op = replace(op, detail=_stored(op.detail))
        if isinstance(op, EventRow):
            _insert(events, replace(op))
        elif isinstance(op, JobLogRow):
            _insert_log(logs, replace(op))
        elif isinstance(op, (CloseStep, Progress)):
            for row in _open_rows(events, op.domain, op.job_id):
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
        elif isinstance(op, FailClosedStep):
            _fail_sibling_closed(events, op)
        elif isinstance(op, CloseForeign):
            for row in _open_rows(events, op.domain, op.job_id):
                if row.attempt == op.attempt and row.execution_id != op.execution_id:
                    _abandon(row, op.at_us)
        else:
            _settle_earlier_attempts(events, logs, op)
    return events


def _stored(detail: Mapping[str, Any]) -> Any:
    """The detail as the jsonb column keeps it (cleaned, bounded: what the store sends)."""
    return json.loads(encode_detail(detail) or "null")


def _open_rows(events: list[EventRow], domain: str, job_id: str) -> list[EventRow]:
    return [
        r
        for r in events
        if r.type == STEP and r.ended_us is None and (r.domain, r.job_id) == (domain, job_id)
    ]


def _fail_sibling_closed(events: list[EventRow], op: FailClosedStep) -> None:
    """A row a sibling step's start closed COMPLETED, whose own end failed: FAILED."""
    rows = [
        r
        for r in events
        if r.type == STEP and (r.domain, r.job_id, r.attempt) == (op.domain, op.job_id, op.attempt)
    ]
    for row in rows:
        if (row.execution_id, row.span_id, row.step_status) != (
            op.execution_id, op.span_id, COMPLETED
        ) or row.ended_us is None:  # fmt: skip
            continue
        if any(
            other is not row
            and other.execution_id == row.execution_id
            and other.created_us == row.ended_us
            and other.step_status != SKIPPED
            for other in rows
        ):
            row.step_status, row.message = FAILED, op.message
            row.ended_us = max(row.created_us, op.ended_us)


def _abandon(row: EventRow, at_us: int) -> None:
    row.step_status, row.message = FAILED, ABANDONED
    row.ended_us = max(row.created_us, at_us)


def _insert(events: list[EventRow], row: EventRow) -> None:
    if row.type == STEP and row.ended_us is None:
        # One open step per attempt: an open step of another execution is taken over.
        for other in _open_rows(events, row.domain, row.job_id):
            if other.attempt == row.attempt:
                if other.execution_id == row.execution_id:
                    return  # the unique index keeps the row already open
                _abandon(other, row.created_us)
    events.append(row)


def _insert_log(logs: list[JobLogRow], row: JobLogRow) -> None:
    key = (row.domain, row.job_id, row.attempt)
    if all((log.domain, log.job_id, log.attempt) != key for log in logs):
        logs.append(row)  # the first final row of an attempt wins


def _settle_earlier_attempts(events: list[EventRow], logs: list[JobLogRow], op: Abandon) -> None:
    """Attempt N started: earlier attempts' open steps close, unsettled attempts get a log."""
    earlier: dict[int, list[EventRow]] = {}
    for row in events:
        if (row.domain, row.job_id) == (op.domain, op.job_id) and row.attempt < op.attempt:
            earlier.setdefault(row.attempt, []).append(row)
    for attempt, rows in sorted(earlier.items()):
        steps = [r for r in rows if r.type == STEP]
        run = [r for r in steps if r.step_status != SKIPPED]
        last = max(run, key=lambda r: r.created_us, default=None)
        last_at = max(max(r.created_us, r.ended_us or 0) for r in rows)
        for row in steps:
            if row.ended_us is None:
                _abandon(row, op.at_us)
        _insert_log(
            logs,
            JobLogRow(
                op.domain, op.job_id, next((r.job_type for r in rows if r.job_type), None),
                attempt, FAILED, ABANDONED, {"step": None if last is None else last.step_key},
                next((r.trace_id for r in reversed(rows) if r.trace_id), None),
                max(last_at, op.at_us),
            ),
        )  # fmt: skip


class InMemoryStore:
    """The writer's store, keeping ``job_event`` and ``job_log`` rows in memory.

    Thread-safe for reading while the writer writes. ``batches`` keeps what was written, in
    order, for tests that look at the batching itself.
    """

    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self.last_transaction: int | None = None
        self.last_changes: Committed | None = None  # no metrics from this store
        self._events: list[EventRow] = []
        self._logs: list[JobLogRow] = []
        self._lock = threading.Lock()

    # -- what the writer calls ----------------------------------------------------------------

    def write(self, batch: Batch) -> None:
        """Apply one batch, as one transaction would."""
        with self._lock:
            self.batches.append(batch)
            apply(operations(batch), self._events, self._logs)

    def write_one_by_one(
        self, batch: Batch, on_rejected: Callable[[str, BaseException], None]
    ) -> None:
        self.write(batch)  # nothing is ever rejected here

    def transaction_status(self, transaction: int) -> str | None:
        return "committed"

    def refresh_heartbeats(self, open_steps: Sequence[tuple[str, str, int, str]]) -> None:
        return None

    def close(self) -> None:
        return None

    def forget_after_fork(self) -> None:
        return None

    # -- reading back -------------------------------------------------------------------------

    def steps(self, domain: str | None = None, job_id: str | None = None) -> list[EventRow]:
        """STEP rows (of one job, if named) in the order they were written."""
        return [r for r in self._rows(domain, job_id) if r.type == STEP]

    def events(self, domain: str | None = None, job_id: str | None = None) -> list[EventRow]:
        """Every ``job_event`` row (of one job, if named): steps and ordinary events."""
        return self._rows(domain, job_id)

    def job_logs(self, domain: str | None = None, job_id: str | None = None) -> list[JobLogRow]:
        """Final rows (of one job, if named), one per finished attempt."""
        with self._lock:
            return [replace(r) for r in self._logs if _matches(r.domain, r.job_id, domain, job_id)]

    def _rows(self, domain: str | None, job_id: str | None) -> list[EventRow]:
        with self._lock:
            return [
                replace(r) for r in self._events if _matches(r.domain, r.job_id, domain, job_id)
            ]


def _matches(row_domain: str, row_job: str, domain: str | None, job_id: str | None) -> bool:
    return (domain is None or row_domain == domain) and (job_id is None or row_job == job_id)
