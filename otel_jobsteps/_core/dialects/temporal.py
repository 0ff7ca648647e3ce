"""Temporal, from its Python SDK's tracing (``temporalio`` 1.35.0).

Source: ``temporalio/contrib/opentelemetry/_otel_interceptor.py`` (the ``OpenTelemetryPlugin``)
and ``_interceptor.py`` (the older ``TracingInterceptor``). A workflow run is a SERVER span
``RunWorkflow:<workflow type>`` with ``temporalWorkflowID`` and ``temporalRunID``; each attempt
of an activity is a SERVER span ``RunActivity:<activity type>`` with ``temporalActivityID``
(and the workflow's ids), under the workflow's ``StartActivity:<type>`` span. A failure sets the
status ERROR ``<type>: <message>`` (a benign ``ApplicationError`` leaves it unset). No span says
which attempt of an activity or of a workflow it is.

- ``RunWorkflow`` is the job: domain ``temporal``, id ``temporalWorkflowID``, type the workflow
  type, attempt 1, tag ``run`` = ``temporalRunID``. Every ``RunActivity`` in it is a step keyed
  by the activity type (detail: ``activity_id``): an activity Temporal retried is several such
  spans, so several rows of that key in order (FAILED, FAILED, COMPLETED), each ended before
  the next starts. A step is given the job's span as its parent: its own, ``StartActivity``,
  ended when the activity was scheduled. This fits the unit only with
  ``OpenTelemetryPlugin(add_temporal_spans=True)`` (without it there are no such spans) and
  the activities run by the workflow's own worker process: the plugin's ``RunWorkflow`` lasts
  as long as the workflow runs there.
- The ``TracingInterceptor``'s ``RunWorkflow`` lasts no time at all (started and ended at once,
  ``_completed_workflow_span``): it is not a job, and its activities' spans are not inside it.
  Nor are the activities a worker of another process runs. Such a ``RunActivity`` is a unit of
  its own and a job: domain ``temporal``, id ``<workflow id>/<activity id>``, type the activity
  type, attempt 1 unless the activity's code names it (``job.attempt`` from
  ``activity.info().attempt``): no attribute says which attempt it is, so without that a retry
  is a second run of attempt 1 and the first run's end stands (docs/dialects.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ...attributes import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_ID,
    JOB_STEP_DETAIL,
    JOB_STEP_KEY,
    JOB_TAG_PREFIX,
    JOB_TYPE,
)
from ..facts import SpanFacts
from .base import KIND_SERVER, Dialect, Gate, with_defaults
from .units import detail_json, nest

__all__ = ["DIALECT"]

WORKFLOW_ID = "temporalWorkflowID"
RUN_ID = "temporalRunID"
ACTIVITY_ID = "temporalActivityID"
RUN_WORKFLOW = "RunWorkflow:"
RUN_ACTIVITY = "RunActivity:"
DOMAIN = "temporal"


def _may_start_job(name: str, kind: int, attributes: Mapping[str, Any]) -> bool:
    return kind == KIND_SERVER and name.startswith((RUN_WORKFLOW, RUN_ACTIVITY))


def _recognise(unit: Sequence[SpanFacts]) -> list[SpanFacts]:
    root = unit[0]
    if root.name.startswith(RUN_ACTIVITY):
        if JOB_STEP_KEY in root.attributes:  # already a step of its workflow's unit (collect
            return list(unit)  # reads its ended copy again): not a job of its own
        return [_activity_job(root), *unit[1:]]
    return _under_their_jobs(nest(unit, _workflow_job, _activity_step))


def _under_their_jobs(spans: list[SpanFacts]) -> list[SpanFacts]:
    """Each activity step with its workflow's job span as its parent: its own parent, the
    workflow's ``StartActivity``, ended once the activity was scheduled, before the step starts,
    and the translation places a span only under a parent still open."""
    job_of: dict[int, int] = {}  # span id -> the job span it lies in
    placed = []
    for span in spans:
        job = span.span_id if JOB_ID in span.attributes else job_of.get(span.parent_span_id)
        if job is None:
            placed.append(span)
            continue
        job_of[span.span_id] = job
        if JOB_STEP_KEY in span.attributes and span.parent_span_id != job:
            span = replace(span, parent_span_id=job)
        placed.append(span)
    return placed


def _workflow_job(span: SpanFacts) -> SpanFacts | None:
    """A ``RunWorkflow`` span that lasts (the plugin's) as a job; None for any other span (the
    TracingInterceptor's ``RunWorkflow`` lasts no time)."""
    if not span.name.startswith(RUN_WORKFLOW) or span.kind != KIND_SERVER:
        return None
    workflow_id = span.attributes.get(WORKFLOW_ID)
    if not workflow_id or span.end_ns <= span.start_ns:
        return None
    job = {
        JOB_DOMAIN: DOMAIN,
        JOB_ID: str(workflow_id),
        JOB_TYPE: span.name.removeprefix(RUN_WORKFLOW),
        JOB_ATTEMPT: 1,
        JOB_TAG_PREFIX + "run": span.attributes.get(RUN_ID) or None,
    }
    return with_defaults(span, job)


def _activity_step(span: SpanFacts) -> SpanFacts | None:
    """A ``RunActivity`` span as a step; None for any other span."""
    if not span.name.startswith(RUN_ACTIVITY) or span.kind != KIND_SERVER:
        return None
    detail = {"activity_id": span.attributes.get(ACTIVITY_ID)}
    step = {
        JOB_STEP_KEY: span.name.removeprefix(RUN_ACTIVITY),
        JOB_STEP_DETAIL: detail_json(detail),
    }
    return with_defaults(span, step)


def _activity_job(span: SpanFacts) -> SpanFacts:
    """A ``RunActivity`` outside its workflow's unit as a job (attempt 1 unless the code says)."""
    workflow_id = span.attributes.get(WORKFLOW_ID)
    if not workflow_id:
        return span
    job = {
        JOB_DOMAIN: DOMAIN,
        JOB_ID: f"{workflow_id}/{span.attributes.get(ACTIVITY_ID)}",
        JOB_TYPE: span.name.removeprefix(RUN_ACTIVITY),
        JOB_ATTEMPT: 1,
        JOB_TAG_PREFIX + "run": span.attributes.get(RUN_ID) or None,
    }
    return with_defaults(span, job)


DIALECT = Dialect(
    name="temporal",
    source=(
        "temporalio 1.35.0: temporalio/contrib/opentelemetry/_otel_interceptor.py "
        "(OpenTelemetryPlugin), _interceptor.py (TracingInterceptor)"
    ),
    may_start_job=_may_start_job,
    recognise=_recognise,
    kinds=frozenset({KIND_SERVER}),
    gate=Gate(prefixes=(RUN_WORKFLOW, RUN_ACTIVITY)),
)
