"""BullMQ (``bullmq-otel``), understood without configuration.

What its spans say (read from bullmq's src/classes/worker.ts ``processJob``/``handleCompleted``/
``handleFailed``, src/classes/job.ts ``moveToCompleted``/``moveToFailed`` and src/utils ``trace``):

- Each run of a job is one CONSUMER span ``process <queue>`` with ``bullmq.queue.name``,
  ``bullmq.queue.operation = "process"``, ``bullmq.job.id`` and ``bullmq.job.name`` from its
  start: domain, id and type.
- ``bullmq.job.attempts.made`` is set only at the end, after ``moveToCompleted`` or
  ``moveToFailed`` added this run: it *is* the 1-based attempt number. A run whose move failed
  (its lock was lost) never gets it; such a span, and a start marker of a process span, is not
  a job span unless the worker set ``job.attempt`` itself.
- A failure leaves the status unset: the processor's error is caught and shows as a
  ``job failed`` event with ``bullmq.job.failed.reason``. That event fails the attempt.
- ``moveToFailed`` opens a child span whose operation says what BullMQ decided: ``retry`` or
  ``delay`` (another attempt follows: the attempt is FAILED ``retry`` and the child becomes a
  RETRY_SCHEDULED event with ``next_attempt``), or ``fail`` (FAILED ``error``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ...attributes import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_EVENT_DETAIL,
    JOB_EVENT_TYPE,
    JOB_ID,
    JOB_OUTCOME,
    JOB_TYPE,
)
from ..facts import SpanFacts
from ..vocabulary import EVENT_RETRY_SCHEDULED, OUTCOME_RETRY
from .base import Dialect, Gate, children, number, with_defaults

__all__ = [
    "BULLMQ_FAILED_EVENT",
    "BULLMQ_JOB_ID",
    "BULLMQ_OPERATION",
    "DIALECT",
]

BULLMQ_QUEUE = "bullmq.queue.name"
BULLMQ_OPERATION = "bullmq.queue.operation"
BULLMQ_JOB_ID = "bullmq.job.id"
BULLMQ_JOB_NAME = "bullmq.job.name"
BULLMQ_ATTEMPTS_MADE = "bullmq.job.attempts.made"
BULLMQ_FAILED_EVENT = "job failed"
BULLMQ_FAILED_REASON = "bullmq.job.failed.reason"
BULLMQ_RETRY_OPERATIONS = frozenset({"retry", "delay"})


def _may_start_job(name: str, kind: int, attributes: Mapping[str, Any]) -> bool:
    return attributes.get(BULLMQ_OPERATION) == "process" and BULLMQ_JOB_ID in attributes


def _recognise(unit: Sequence[SpanFacts]) -> list[SpanFacts]:
    span = unit[0]
    names = span.attributes
    attempt = names.get(JOB_ATTEMPT, names.get(BULLMQ_ATTEMPTS_MADE))
    if attempt is None:
        return list(unit)  # not yet known (a start marker) or never (the run lost its lock)
    error, message = span.error, span.status_message
    for event in span.events:
        if event.name == BULLMQ_FAILED_EVENT:
            error = True
            reason = (event.attributes or {}).get(BULLMQ_FAILED_REASON)
            message = message or (None if reason is None else str(reason))
    mapped: dict[int, SpanFacts] = {}
    retried = False
    for child in children(unit, span):
        if child.attributes.get(BULLMQ_OPERATION) in BULLMQ_RETRY_OPERATIONS:
            retried = True
            next_attempt = number(attempt)
            detail = {} if next_attempt is None else {"next_attempt": next_attempt + 1}
            mapped[child.span_id] = with_defaults(
                child, {JOB_EVENT_TYPE: EVENT_RETRY_SCHEDULED, JOB_EVENT_DETAIL: json.dumps(detail)}
            )
    job = {
        JOB_ATTEMPT: attempt,
        JOB_DOMAIN: names.get(BULLMQ_QUEUE),
        JOB_ID: names[BULLMQ_JOB_ID],
        JOB_TYPE: names.get(BULLMQ_JOB_NAME),
        JOB_OUTCOME: OUTCOME_RETRY if retried else None,
    }
    mapped[span.span_id] = with_defaults(span, job, error=error, status_message=message)
    return [mapped.get(each.span_id, each) for each in unit]


DIALECT = Dialect(
    name="bullmq",
    source="bullmq (bullmq-otel): src/classes/worker.ts, src/classes/job.ts, src/utils",
    may_start_job=_may_start_job,
    recognise=_recognise,
    gate=Gate(attributes=frozenset({BULLMQ_OPERATION})),
)
