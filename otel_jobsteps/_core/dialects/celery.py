"""Celery as OpenTelemetry's own instrumentation traces it (``opentelemetry-instrumentation-celery``
0.66b2, ``opentelemetry/instrumentation/celery/__init__.py`` and ``utils.py``), with none of our
Celery integration: each task run is an attempt.

- ``_trace_prerun`` (``__init__.py:177-204``) starts ``run/<task name>``, CONSUMER, with no
  attributes: the dialect claims it by that name and kind.
- ``_trace_postrun`` (``:206-229``) sets everything just before the span ends: ``celery.action =
  "run"``, ``celery.state`` (the run's end state, from the ``task_postrun`` signal), then from
  the task's request (``utils.py:61-127``) ``messaging.message.id`` (the task id),
  ``celery.retries`` (left out when 0), ``messaging.destination`` (the delivery's routing key),
  ``celery.timelimit`` (hard, soft) and ``celery.task_name``. So the job is known at its end.
- A failure (``_trace_failure``, ``:295-331``) sets the status ERROR and records the exception;
  ``self.retry(...)`` (``_trace_retry``, ``:333-355``) sets only ``celery.retry.reason``, and
  the state is ``RETRY``; the retry's republish (``_trace_before_publish``, ``:242-273``) is a
  PRODUCER ``apply_async/<task name>`` span inside the run, with the same ``messaging.message.id``.

What the model gets: id = the task id, domain = the routing key (``celery`` when absent), type =
the task name, attempt = ``celery.retries`` + 1, time limit = the soft limit, else the hard one.
State ``RETRY``: the attempt is FAILED ``retry`` with the retry reason as its error, and the
republish span is its RETRY_SCHEDULED event. State ``FAILURE`` fails the attempt even when the
task's ``throws`` kept the status unset; a ``SoftTimeLimitExceeded`` or ``TimeLimitExceeded``
makes it FAILED ``time_limit``. Children with ``job.step.key`` are the run's steps.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ...attributes import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_ERROR,
    JOB_EVENT_DETAIL,
    JOB_EVENT_MESSAGE,
    JOB_EVENT_TYPE,
    JOB_ID,
    JOB_OUTCOME,
    JOB_TIME_LIMIT,
    JOB_TYPE,
)
from ..events import EventLike
from ..facts import SpanFacts
from ..vocabulary import EVENT_RETRY_SCHEDULED, OUTCOME_RETRY, OUTCOME_TIME_LIMIT
from .base import KIND_CONSUMER, KIND_PRODUCER, Dialect, Gate, number, with_defaults

__all__ = ["DIALECT"]

RUN_PREFIX = "run/"
PUBLISH_PREFIX = "apply_async/"
CELERY_ACTION = "celery.action"
CELERY_STATE = "celery.state"
CELERY_RETRIES = "celery.retries"
CELERY_TASK_NAME = "celery.task_name"
CELERY_TIME_LIMIT = "celery.timelimit"
CELERY_RETRY_REASON = "celery.retry.reason"
MESSAGE_ID = "messaging.message.id"
DESTINATION = "messaging.destination"
DEFAULT_DOMAIN = "celery"
# as the SDK names them in an ``exception`` event (Celery re-exports billiard's)
TIME_LIMIT_ERRORS = frozenset(
    {"billiard.exceptions.SoftTimeLimitExceeded", "billiard.exceptions.TimeLimitExceeded"}
)


def _may_start_job(name: str, kind: int, attributes: Mapping[str, Any]) -> bool:
    return kind == KIND_CONSUMER and name.startswith(RUN_PREFIX)


def _recognise(unit: Sequence[SpanFacts]) -> list[SpanFacts]:
    run = unit[0]
    names = run.attributes
    task_id = names.get(MESSAGE_ID)
    if names.get(CELERY_ACTION) != "run" or task_id is None:
        return list(unit)  # no postrun: not a task run Celery finished
    retries = number(names.get(CELERY_RETRIES, 0))
    attempt = 0 if retries is None else retries + 1  # 0: the translation rejects it
    state = names.get(CELERY_STATE)
    job: dict[str, Any] = {
        JOB_DOMAIN: names.get(DESTINATION) or DEFAULT_DOMAIN,
        JOB_ID: task_id,
        JOB_TYPE: names.get(CELERY_TASK_NAME),
        JOB_ATTEMPT: attempt,
        JOB_TIME_LIMIT: _time_limit(names.get(CELERY_TIME_LIMIT)),
    }
    mapped: dict[int, SpanFacts] = {}
    error = run.error
    if state == "RETRY":
        reason = names.get(CELERY_RETRY_REASON)
        job |= {JOB_OUTCOME: OUTCOME_RETRY, JOB_ERROR: reason}
        for span in unit[1:]:
            if _is_republish(span, task_id):
                event = {
                    JOB_EVENT_TYPE: EVENT_RETRY_SCHEDULED,
                    JOB_EVENT_MESSAGE: reason,
                    JOB_EVENT_DETAIL: json.dumps({"next_attempt": attempt + 1}),
                }
                mapped[span.span_id] = with_defaults(span, event)
                break
    elif state == "FAILURE":
        error = True
        if any(_exception_type(event) in TIME_LIMIT_ERRORS for event in run.events):
            job[JOB_OUTCOME] = OUTCOME_TIME_LIMIT
    changes = {} if error == run.error else {"error": error}
    mapped[run.span_id] = with_defaults(run, job, **changes)
    return [mapped.get(span.span_id, span) for span in unit]


def _is_republish(span: SpanFacts, task_id: object) -> bool:
    return (
        span.kind == KIND_PRODUCER
        and span.name.startswith(PUBLISH_PREFIX)
        and span.attributes.get(MESSAGE_ID) == task_id
    )


def _exception_type(event: EventLike) -> object:
    return (event.attributes or {}).get("exception.type")


def _time_limit(value: object) -> float | None:
    """The soft limit, else the hard one, of Celery's ``(hard, soft)`` (ints, or strings with
    ``""`` for a missing one)."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        return None
    for limit in reversed(value):
        seconds = number(limit) if not isinstance(limit, float) else limit
        if seconds is not None and seconds > 0:
            return float(seconds)
    return None


DIALECT = Dialect(
    name="celery",
    source="opentelemetry-instrumentation-celery 0.66b2: "
    "opentelemetry/instrumentation/celery/__init__.py, utils.py",
    may_start_job=_may_start_job,
    recognise=_recognise,
    kinds=frozenset({KIND_CONSUMER}),
    gate=Gate(prefixes=(RUN_PREFIX,)),
)
