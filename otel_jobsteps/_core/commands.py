"""The recorder's commands: what the translation decides a span or log record means.

The contract between the translation (`_core.translate`, both doors) and the recorder
(`_core.recorder`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

__all__ = [
    "Command",
    "EventRecorded",
    "JobEnded",
    "JobStarted",
    "LogRecorded",
    "ProgressReported",
    "Scope",
    "StepEnded",
    "StepRan",
    "StepSkipped",
    "StepStarted",
]


class Scope(NamedTuple):
    """One execution of one attempt of a job, as the job span declared it. Its first four
    fields (``scope[:4]``) are the columns every row of the attempt starts with."""

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
    tags: tuple[tuple[str, str], ...] = ()  # (name, value), already cut to the caps (translate)


class StepStarted(NamedTuple):
    scope: Scope
    key: str
    span_id: int
    start_ns: int


class ProgressReported(NamedTuple):
    scope: Scope
    key: str
    attributes: Mapping[str, Any]  # the newest progress event's attributes: the new detail


class StepEnded(NamedTuple):
    scope: Scope
    key: str
    end_ns: int
    failed: bool
    explicit_detail: object
    error: str | None
    span_id: int = 0  # the step span's: a late failing end finds the row a sibling closed


class StepSkipped(NamedTuple):
    """A step span that says it was skipped (``otel_jobsteps.step.skipped``): a row ended
    SKIPPED, which neither opens nor closes a step."""

    scope: Scope
    key: str
    span_id: int
    start_ns: int
    end_ns: int
    explicit_detail: object


class StepRan(NamedTuple):
    """A step whose start, newest progress and end arrive together: what StepStarted,
    ProgressReported (if ``progress`` is not empty) and StepEnded say one after the other."""

    scope: Scope
    key: str
    span_id: int
    start_ns: int
    end_ns: int
    failed: bool
    explicit_detail: object
    error: str | None
    progress: Mapping[str, Any]  # the newest progress event's attributes; empty if none


class JobEnded(NamedTuple):
    scope: Scope
    end_ns: int
    failed: bool
    outcome: object
    error: str | None
    resource: tuple[str | None, ...] = ()  # RESOURCE_KEYS' values, kept with the final row


class EventRecorded(NamedTuple):
    scope: Scope
    type: str
    message: str | None
    detail: Mapping[str, Any] | None
    time_ns: int


class LogRecorded(NamedTuple):
    """A log line of an attempt: the translation made its text and severity name already."""

    scope: Scope
    key: str | None  # the step open in the record's context; None between steps
    time_ns: int
    severity: str
    message: str
    attributes: Mapping[str, Any]
    trace_id: int
    span_id: int


Command = (
    JobStarted
    | StepStarted
    | ProgressReported
    | StepEnded
    | StepRan
    | StepSkipped
    | JobEnded
    | EventRecorded
    | LogRecorded
)
