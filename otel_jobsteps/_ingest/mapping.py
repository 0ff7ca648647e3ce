"""Queue libraries' own job spans -> the ``job.*`` attributes the translation reads.

A ``job.*`` attribute set on a span always wins; a mapping only fills what is missing.

BullMQ (``bullmq-otel``), understood without configuration. What its spans say (read from
bullmq's src/classes/worker.ts ``processJob``/``handleCompleted``/``handleFailed``,
src/classes/job.ts ``moveToCompleted``/``moveToFailed`` and src/utils ``trace``):

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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .._core.dialects.base import number
from .._core.facts import SpanFacts
from .._core.vocabulary import EVENT_RETRY_SCHEDULED, OUTCOME_RETRY
from ..attributes import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_EVENT_DETAIL,
    JOB_EVENT_TYPE,
    JOB_ID,
    JOB_OUTCOME,
    JOB_TYPE,
)
from ..errors import ConfigurationError

__all__ = ["JobMapping", "map_trace"]

BULLMQ_QUEUE = "bullmq.queue.name"
BULLMQ_OPERATION = "bullmq.queue.operation"
BULLMQ_JOB_ID = "bullmq.job.id"
BULLMQ_JOB_NAME = "bullmq.job.name"
BULLMQ_ATTEMPTS_MADE = "bullmq.job.attempts.made"
BULLMQ_FAILED_EVENT = "job failed"
BULLMQ_FAILED_REASON = "bullmq.job.failed.reason"
BULLMQ_RETRY_OPERATIONS = frozenset({"retry", "delay"})
_MAPPING_PART = re.compile(r"^(id|domain|type|attempt)=([^=+,\s]+)(?:\+(\d{1,3}))?$")


@dataclass(frozen=True, slots=True)
class JobMapping:
    """Which attributes of another library's job span name the job (``--mapping``).

    A span with the ``job_id`` attribute and no ``job.id`` is a job span. ``attempt_offset``
    is added to the attempt attribute: 1 where the library counts the attempts made before.
    Without an attempt attribute the attempt is 1.
    """

    job_id: str
    domain: str
    job_type: str | None = None
    attempt: str | None = None
    attempt_offset: int = 0

    @classmethod
    def parse(cls, text: str) -> JobMapping:
        """``id=ATTR,domain=ATTR[,type=ATTR][,attempt=ATTR[+N]]``."""
        found: dict[str, tuple[str, int]] = {}
        for part in text.split(","):
            match = _MAPPING_PART.match(part.strip())
            if match is None:
                raise ConfigurationError(
                    f"invalid mapping part {part.strip()!r}: use "
                    "id=ATTR,domain=ATTR[,type=ATTR][,attempt=ATTR[+N]]"
                )
            name, attribute, offset = match.groups()
            if name in found or (offset and name != "attempt"):
                raise ConfigurationError(f"invalid mapping {text!r}: {name} twice or with +N")
            found[name] = (attribute, int(offset or 0))
        if "id" not in found or "domain" not in found:
            raise ConfigurationError(f"invalid mapping {text!r}: id= and domain= are required")
        attempt = found.get("attempt")
        return cls(
            job_id=found["id"][0],
            domain=found["domain"][0],
            job_type=found["type"][0] if "type" in found else None,
            attempt=attempt[0] if attempt else None,
            attempt_offset=attempt[1] if attempt else 0,
        )


def map_trace(spans: Sequence[SpanFacts], mappings: Sequence[JobMapping] = ()) -> list[SpanFacts]:
    """The spans of one trace (one fact per span id) with queue libraries' job spans given
    their ``job.*`` names."""
    children: dict[int, list[SpanFacts]] = {}
    for span in spans:
        if span.parent_span_id:
            children.setdefault(span.parent_span_id, []).append(span)
    mapped: dict[int, SpanFacts] = {}
    for span in spans:
        attributes = span.attributes
        if JOB_ID in attributes or JOB_EVENT_TYPE in attributes:
            continue
        if attributes.get(BULLMQ_OPERATION) == "process" and BULLMQ_JOB_ID in attributes:
            _map_bullmq(span, children.get(span.span_id, ()), mapped)
            continue
        for mapping in mappings:
            if mapping.job_id in attributes:
                mapped[span.span_id] = replace(span, attributes=_generic(mapping, attributes))
                break
    return [mapped.get(span.span_id, span) for span in spans]


def _map_bullmq(
    span: SpanFacts, children: Sequence[SpanFacts], mapped: dict[int, SpanFacts]
) -> None:
    attributes = dict(span.attributes)
    attempt = attributes.get(JOB_ATTEMPT, attributes.get(BULLMQ_ATTEMPTS_MADE))
    if attempt is None:
        return  # not yet known (a start marker) or never (the run lost its lock)
    attributes.setdefault(JOB_ATTEMPT, attempt)
    attributes.setdefault(JOB_DOMAIN, attributes.get(BULLMQ_QUEUE))
    attributes.setdefault(JOB_ID, attributes[BULLMQ_JOB_ID])
    if BULLMQ_JOB_NAME in attributes:
        attributes.setdefault(JOB_TYPE, attributes[BULLMQ_JOB_NAME])
    error, message = span.error, span.status_message
    for event in span.events:
        if event.name == BULLMQ_FAILED_EVENT:
            error = True
            reason = (event.attributes or {}).get(BULLMQ_FAILED_REASON)
            message = message or (None if reason is None else str(reason))
    for child in children:
        if child.attributes.get(BULLMQ_OPERATION) in BULLMQ_RETRY_OPERATIONS:
            attributes.setdefault(JOB_OUTCOME, OUTCOME_RETRY)
            next_attempt = number(attempt)
            detail = {} if next_attempt is None else {"next_attempt": next_attempt + 1}
            mapped[child.span_id] = replace(
                child,
                attributes={
                    **child.attributes,
                    JOB_EVENT_TYPE: EVENT_RETRY_SCHEDULED,
                    JOB_EVENT_DETAIL: json.dumps(detail),
                },
            )
    mapped[span.span_id] = replace(span, attributes=attributes, error=error, status_message=message)


def _generic(mapping: JobMapping, attributes: Mapping[str, Any]) -> dict[str, Any]:
    result = dict(attributes)
    result.setdefault(JOB_ID, attributes[mapping.job_id])
    result.setdefault(JOB_DOMAIN, attributes.get(mapping.domain))
    if mapping.job_type is not None and mapping.job_type in attributes:
        result.setdefault(JOB_TYPE, attributes[mapping.job_type])
    attempt = 1
    if mapping.attempt is not None:
        value = number(attributes.get(mapping.attempt))
        attempt = 0 if value is None else value + mapping.attempt_offset  # 0: rejected
    result.setdefault(JOB_ATTEMPT, attempt)
    return result
