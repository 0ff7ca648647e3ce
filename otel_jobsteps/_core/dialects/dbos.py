"""DBOS Transact for Python, from its tracer (``dbos`` 3.4.0).

Source: ``dbos/_tracer.py`` (``DBOSTracer.start_span``, ``_LEGACY_TO_SEMCONV``),
``dbos/_context.py`` (``_start_span``, ``_end_span``, ``TracedAttributes``) and ``dbos/_core.py``
(the workflow's and the step's attributes). A workflow run is a span named after the workflow
function with ``operationType = "workflow"``, ``operationUUID`` (the workflow id) and
``queueName`` when it was queued; each step is a span named after the step with ``operationType
= "step"`` inside it. With ``otel_attribute_format: semconv`` the names are
``dbos.operation.type``, ``dbos.operation.workflow_id`` and ``dbos.queue.name``; both are read.
The status is OK, or ERROR with the exception's text. A step's retries run inside its one span
(each retry is a warning log record in it); a recovered workflow is a new span of the same id.

The workflow span is the job: domain the queue (``dbos`` without it), id the workflow id, type
its name, attempt 1 (no attribute counts recoveries). Its step spans (not one inside another
step) are steps keyed by their name; a child workflow is a job of its own.

DBOS sets these attributes just after starting the span (``tracer.start_span(name=...)`` then
``set_attribute``), so a span processor sees none of them at the span's start: the live door
claims a DBOS workflow when its first child starts (by then they are set: a span of its kind
that had no attribute at its start is asked again then, ``claims_late``, and its start queued
before the child's);
``collect`` reads them from the ended span. A workflow with no span inside is no job live.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...attributes import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID, JOB_STEP_KEY, JOB_TYPE
from ..facts import SpanFacts
from .base import KIND_INTERNAL, Dialect, Gate, with_defaults
from .units import nest

__all__ = ["DIALECT"]

OPERATION_TYPE = ("operationType", "dbos.operation.type")
WORKFLOW_ID = ("operationUUID", "dbos.operation.workflow_id")
QUEUE_NAME = ("queueName", "dbos.queue.name")
WORKFLOW, STEP = "workflow", "step"


def _value(attributes: Mapping[str, Any], names: tuple[str, str]) -> Any:
    """The legacy attribute, else its semconv name."""
    legacy, semconv = names
    value = attributes.get(legacy)
    return attributes.get(semconv) if value is None else value


def _may_start_job(name: str, kind: int, attributes: Mapping[str, Any]) -> bool:
    # `_value` inline: asked about every INTERNAL span outside a job, on the job's thread.
    operation = attributes.get("operationType")
    if operation is None:
        operation = attributes.get("dbos.operation.type")
    return bool(operation == WORKFLOW)


def _recognise(unit: Sequence[SpanFacts]) -> list[SpanFacts]:
    return nest(unit, _job, _step)


def _job(span: SpanFacts) -> SpanFacts | None:
    """A workflow span naming its workflow id as a job span; None for any other span."""
    workflow_id = _value(span.attributes, WORKFLOW_ID)
    if _value(span.attributes, OPERATION_TYPE) != WORKFLOW or not workflow_id:
        return None
    job = {
        JOB_DOMAIN: _value(span.attributes, QUEUE_NAME) or "dbos",
        JOB_ID: str(workflow_id),
        JOB_TYPE: span.name,
        JOB_ATTEMPT: 1,
    }
    return with_defaults(span, job)


def _step(span: SpanFacts) -> SpanFacts | None:
    """A step span as a step keyed by its name; None for any other span."""
    if _value(span.attributes, OPERATION_TYPE) != STEP:
        return None
    return with_defaults(span, {JOB_STEP_KEY: span.name})


DIALECT = Dialect(
    name="dbos",
    source="dbos 3.4.0 (PyPI): dbos/_tracer.py, dbos/_context.py, dbos/_core.py",
    may_start_job=_may_start_job,
    recognise=_recognise,
    kinds=frozenset({KIND_INTERNAL}),  # DBOS starts its spans with the tracer's default kind
    claims_late=True,
    gate=Gate(attributes=frozenset(OPERATION_TYPE)),
)
