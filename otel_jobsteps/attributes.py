"""Span attribute names: the public contract between job code and the processor."""

from __future__ import annotations

from ._core.vocabulary import (
    OUTCOME_TARGET_DELETED,  # the outcome job code sets: public from here too
)

__all__ = [
    "JOB_ATTEMPT",
    "JOB_DOMAIN",
    "JOB_ERROR",
    "JOB_EVENT_DETAIL",
    "JOB_EVENT_MESSAGE",
    "JOB_EVENT_TYPE",
    "JOB_EXECUTION",
    "JOB_ID",
    "JOB_OUTCOME",
    "JOB_STEP_DETAIL",
    "JOB_STEP_KEY",
    "JOB_TAG_PREFIX",
    "JOB_TIME_LIMIT",
    "JOB_TYPE",
    "OUTCOME_TARGET_DELETED",
]

JOB_DOMAIN = "job.domain"
"""Tenant, queue or product area of the job (string), on the job span."""
JOB_ID = "job.id"
"""Job id, stable across retries (string), on the job span."""
JOB_TYPE = "job.type"
"""Job kind, e.g. ``thumbnail``, on the job span."""
JOB_ATTEMPT = "job.attempt"
"""1-based attempt number (attempts made before + 1), on the job span."""
JOB_STEP_KEY = "job.step.key"
"""The step's place in the execution, e.g. ``RENDER``; marks a step span."""
JOB_STEP_DETAIL = "job.step.detail"
"""Optional explicit end detail of a step: a JSON object as a string; wins over progress."""
JOB_OUTCOME = "job.outcome"
"""Optional outcome of the job span: a failure reason (``target_deleted``, ``retry``, ...) that
fails the attempt with that reason even if the span ended OK; ``completed`` changes nothing."""
JOB_EXECUTION = "job.execution"
"""Optional id of this run of the attempt (defaults to the job span's trace and span id)."""
JOB_TIME_LIMIT = "job.time_limit"
"""Optional time limit of the attempt in seconds; finishing later is FAILED ``time_limit``."""

JOB_ERROR = "job.error"
"""Optional error text of a failed span (``OSError: disk full``); wins over its ``exception``
events. A queue adapter sets it where the exception that escaped only wraps the error."""
JOB_EVENT_TYPE = "job.event.type"
"""Marks a span as an ordinary job event (``STALLED``, ``RETRY_SCHEDULED``, ...), not a step."""
JOB_EVENT_MESSAGE = "job.event.message"
"""Optional message of an ordinary job event."""
JOB_EVENT_DETAIL = "job.event.detail"
"""Optional detail of an ordinary job event: a JSON object as a string."""
JOB_TAG_PREFIX = "job.tag."
"""Prefix of the optional tags of an attempt on the job span (``job.tag.customer = "acme"``),
read at its start and stored once; searchable (``?tag=customer:acme``)."""
