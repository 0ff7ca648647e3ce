"""CI/CD pipelines, from the OpenTelemetry CI/CD semantic conventions.

Source: the conventions' attribute registry as ``opentelemetry-semantic-conventions`` 0.66b2
ships it (``opentelemetry/semconv/_incubating/attributes/cicd_attributes.py``): a pipeline run
names ``cicd.pipeline.name`` and ``cicd.pipeline.run.id`` and ends with ``cicd.pipeline.result``;
a task run names ``cicd.pipeline.task.name`` and ``cicd.pipeline.task.run.id`` and ends with
``cicd.pipeline.task.run.result``. Results: ``success``, ``failure``, ``error``, ``timeout``,
``cancellation``, ``skip``. A CI system's exporter may put the pipeline's identity on the
resource rather than on each span: it is read there too.

The unit is the outermost CI/CD span claimed. Its innermost task runs (no task run below them)
are steps keyed by ``cicd.pipeline.task.name``; the task run or pipeline run directly above
them is a job (id: its task run id or pipeline run id; type: its task or pipeline name; domain:
the pipeline name; attempt 1, the conventions name none). So a pipeline of jobs of steps (GitHub
Actions' shape) gives one job per CI job, and a pipeline of tasks one job with its tasks as
steps. A result decides the status whatever the span's status says: ``success`` completed;
``failure``, ``error`` failed; a job's ``timeout`` is the outcome ``time_limit`` and its
``cancellation`` the outcome ``cancelled``; a step's ``timeout``/``cancellation`` fails it with
that word as its error. A skipped step is ended, never open: it carries ``job.step.detail`` as
any step and ``otel_jobsteps.step.skipped = true`` (the status SKIPPED). A skipped or lone task
run (nothing above it in the unit) is left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...attributes import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_ERROR,
    JOB_ID,
    JOB_OUTCOME,
    JOB_STEP_DETAIL,
    JOB_STEP_KEY,
    JOB_TAG_PREFIX,
    JOB_TYPE,
)
from ..facts import SpanFacts
from ..vocabulary import CANCELLED, OUTCOME_TIME_LIMIT
from .base import Dialect, Gate, with_defaults
from .units import detail_json

__all__ = ["DIALECT", "STEP_SKIPPED"]

STEP_SKIPPED = "otel_jobsteps.step.skipped"
"""On a step span: the step was skipped (ended, status SKIPPED), not run."""

PIPELINE_NAME = "cicd.pipeline.name"
PIPELINE_RUN_ID = "cicd.pipeline.run.id"
PIPELINE_RESULT = "cicd.pipeline.result"
PIPELINE_RUN_URL = "cicd.pipeline.run.url.full"
TASK_NAME = "cicd.pipeline.task.name"
TASK_RUN_ID = "cicd.pipeline.task.run.id"
TASK_RUN_RESULT = "cicd.pipeline.task.run.result"
TASK_RUN_URL = "cicd.pipeline.task.run.url.full"
TASK_TYPE = "cicd.pipeline.task.type"
ERROR_TYPE = "error.type"

_FAILED = frozenset({"failure", "error"})
_JOB_OUTCOMES = {"timeout": OUTCOME_TIME_LIMIT, "cancellation": CANCELLED}
_STEP_ERRORS = {"timeout": "timeout", "cancellation": "cancellation"}
_SKIP = "skip"


def _may_start_job(name: str, kind: int, attributes: Mapping[str, Any]) -> bool:
    return TASK_RUN_ID in attributes or PIPELINE_RUN_ID in attributes or PIPELINE_NAME in attributes


def _is_task(span: SpanFacts) -> bool:
    return TASK_NAME in span.attributes or TASK_RUN_ID in span.attributes


def _is_pipeline(span: SpanFacts) -> bool:
    attributes = span.attributes
    return not _is_task(span) and (PIPELINE_RUN_ID in attributes or PIPELINE_NAME in attributes)


def _pipeline_value(span: SpanFacts, name: str) -> Any:
    """A pipeline attribute of the span, else of its resource."""
    value = span.attributes.get(name)
    return span.resource.get(name) if value is None else value


def _recognise(unit: Sequence[SpanFacts]) -> list[SpanFacts]:
    by_id = {span.span_id: span for span in unit}
    container: dict[int, int] = {}  # span id -> the nearest CI/CD span above it in the unit
    has_task_below: set[int] = set()
    for span in unit[1:]:
        parent = by_id.get(span.parent_span_id)
        if parent is None:
            continue
        above = parent.span_id if _is_task(parent) or _is_pipeline(parent) else None
        if above is None:
            above = container.get(parent.span_id)
        if above is not None:
            container[span.span_id] = above
            if _is_task(span):
                has_task_below.add(above)
    steps = [
        span
        for span in unit
        if _is_task(span) and span.span_id not in has_task_below and span.span_id in container
    ]
    jobs = dict.fromkeys(container[step.span_id] for step in steps)
    mapped: dict[int, SpanFacts] = {}
    for job_span_id in jobs:
        job = _job(by_id[job_span_id], _pipeline_run(by_id, container, job_span_id))
        if job is None:
            continue
        mapped[job_span_id] = job
        for step in steps:
            if container[step.span_id] == job_span_id:
                mapped[step.span_id] = _step(step)
    return [mapped.get(span.span_id, span) for span in unit]


def _pipeline_run(
    by_id: Mapping[int, SpanFacts], container: Mapping[int, int], span_id: int
) -> Any:
    """The pipeline run id of a span: its own or its resource's, else the nearest pipeline
    run's above it in the unit."""
    while True:
        span = by_id[span_id]
        value = _pipeline_value(span, PIPELINE_RUN_ID)
        if value is not None or span_id not in container:
            return value
        span_id = container[span_id]


def _result(span: SpanFacts) -> str | None:
    result = span.attributes.get(TASK_RUN_RESULT if _is_task(span) else PIPELINE_RESULT)
    return result if isinstance(result, str) else None


def _job(span: SpanFacts, pipeline_run: Any) -> SpanFacts | None:
    """A task run or pipeline run that directly holds steps, as a job span; None if it names
    no run id or was skipped. A task run's id is unique only within its pipeline run: its job
    id is ``<pipeline run id>/<task run id>`` where the pipeline run is known."""
    pipeline = _pipeline_value(span, PIPELINE_NAME)
    if _is_task(span):
        job_id, job_type = span.attributes.get(TASK_RUN_ID), span.attributes.get(TASK_NAME)
        if job_id is not None and pipeline_run is not None:
            job_id = f"{pipeline_run}/{job_id}"
        url = span.attributes.get(TASK_RUN_URL)
    else:
        job_id, job_type = pipeline_run, pipeline
        url = _pipeline_value(span, PIPELINE_RUN_URL)
    result = _result(span)
    if job_id is None or result == _SKIP:
        return None
    values = {
        JOB_DOMAIN: "cicd" if pipeline is None else str(pipeline),
        JOB_ID: str(job_id),
        JOB_TYPE: job_type,
        JOB_ATTEMPT: 1,
        JOB_OUTCOME: _JOB_OUTCOMES.get(result or ""),
        JOB_TAG_PREFIX + "url": url,
    }
    return with_defaults(span, values, **_status(span, result))


def _step(span: SpanFacts) -> SpanFacts:
    """An innermost task run, as a step span (ended: a skipped one too)."""
    attributes = span.attributes
    result = _result(span)
    detail = {
        "task_run_id": attributes.get(TASK_RUN_ID),
        "task_type": attributes.get(TASK_TYPE),
        "result": result,
        "url": attributes.get(TASK_RUN_URL),
    }
    values = {
        JOB_STEP_KEY: attributes.get(TASK_NAME, span.name),
        JOB_STEP_DETAIL: detail_json(detail),
        JOB_ERROR: _STEP_ERRORS.get(result or ""),
        STEP_SKIPPED: True if result == _SKIP else None,
    }
    changes = _status(span, result)
    if result in _STEP_ERRORS:
        changes["error"] = True
    return with_defaults(span, values, **changes)


def _status(span: SpanFacts, result: str | None) -> dict[str, Any]:
    """The span's status as its result says it (a span without a result keeps its own)."""
    if result is None:
        return {}
    if result in _FAILED:
        message = span.status_message or span.attributes.get(ERROR_TYPE) or str(result)
        return {"error": True, "status_message": str(message)}
    return {"error": False} if span.error else {}


DIALECT = Dialect(
    name="cicd",
    source=(
        "OpenTelemetry CI/CD semantic conventions: opentelemetry-semantic-conventions 0.66b2, "
        "opentelemetry/semconv/_incubating/attributes/cicd_attributes.py"
    ),
    may_start_job=_may_start_job,
    recognise=_recognise,
    gate=Gate(attributes=frozenset({TASK_RUN_ID, PIPELINE_RUN_ID, PIPELINE_NAME})),
)
