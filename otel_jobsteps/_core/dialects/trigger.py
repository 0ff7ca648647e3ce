"""Trigger.dev, from its task runtime's spans (``@trigger.dev/core`` 4.8.3, npm).

Source: ``dist/esm/v3/workers/taskExecutor.js`` (``TaskExecutor.execute``),
``dist/esm/v3/taskContext/otelProcessors.js`` (``TaskContextSpanProcessor``),
``dist/esm/v3/taskContext/index.js`` (``contextAttributes``) and
``dist/esm/v3/semanticInternalAttributes.js``. Each attempt of a run is a CONSUMER span
``Attempt <n>`` with ``$span.attempt = true`` and ``$entity.type = "attempt"``; failing, it gets
an ``exception`` event and status ERROR (``otel/utils.js`` ``recordSpanException``). The task
context processor stamps every span of the task with the run's context, flattened under the
``$metadata`` prefix in 4.x (``$metadata.ctx.run.id``; ``ctx.run.id`` in 3.x: both are read):
``ctx.run.id``, ``ctx.attempt.number`` (1-based), ``ctx.task.id``, ``ctx.queue.name``,
``ctx.batch.id``. It also emits a copy of each span at its start (``$span.partial = true``,
INTERNAL), which is never a job. A user's span processor runs before that processor: the context
is on a span from its end only, which is when a unit is read.

The attempt span is the job: domain ``ctx.queue.name`` (``trigger`` without it), id
``ctx.run.id``, type ``ctx.task.id``, attempt ``ctx.attempt.number`` (else the ``<n>`` of its
name), tags ``batch`` and ``conversation`` (``gen_ai.conversation.id``, which Trigger.dev stamps
too). Its steps are the spans the code marks with ``job.step.key``; Trigger.dev's lifecycle
spans (``init()``, ``run()``, ``onSuccess()``, ...) are not steps: the code's own steps run
inside ``run()``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...attributes import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID, JOB_TAG_PREFIX, JOB_TYPE
from ..facts import SpanFacts
from .base import KIND_CONSUMER, Dialect, Gate, number, with_defaults

__all__ = ["DIALECT"]

SPAN_ATTEMPT = "$span.attempt"
SPAN_PARTIAL = "$span.partial"
METADATA = "$metadata."
RUN_ID = "ctx.run.id"
ATTEMPT_NUMBER = "ctx.attempt.number"
TASK_ID = "ctx.task.id"
QUEUE_NAME = "ctx.queue.name"
BATCH_ID = "ctx.batch.id"
CONVERSATION_ID = "gen_ai.conversation.id"


def _may_start_job(name: str, kind: int, attributes: Mapping[str, Any]) -> bool:
    return (
        kind == KIND_CONSUMER
        and attributes.get(SPAN_ATTEMPT) is True
        and attributes.get(SPAN_PARTIAL) is not True
    )


def _context(attributes: Mapping[str, Any], name: str) -> Any:
    """A run context attribute: 4.x's ``$metadata.<name>``, else 3.x's ``<name>``."""
    value = attributes.get(METADATA + name)
    return attributes.get(name) if value is None else value


def _recognise(unit: Sequence[SpanFacts]) -> list[SpanFacts]:
    root = unit[0]
    attributes = root.attributes
    run_id = _context(attributes, RUN_ID)
    if not run_id:
        return list(unit)
    job = {
        JOB_DOMAIN: _context(attributes, QUEUE_NAME) or "trigger",
        JOB_ID: str(run_id),
        JOB_TYPE: _context(attributes, TASK_ID),
        JOB_ATTEMPT: _context(attributes, ATTEMPT_NUMBER)
        or number(root.name.removeprefix("Attempt ")),
        JOB_TAG_PREFIX + "batch": _context(attributes, BATCH_ID),
        JOB_TAG_PREFIX + "conversation": attributes.get(CONVERSATION_ID),
    }
    return [with_defaults(root, job), *unit[1:]]


DIALECT = Dialect(
    name="trigger",
    source=(
        "@trigger.dev/core 4.8.3 (npm): dist/esm/v3/workers/taskExecutor.js, "
        "dist/esm/v3/taskContext/otelProcessors.js, dist/esm/v3/semanticInternalAttributes.js"
    ),
    may_start_job=_may_start_job,
    recognise=_recognise,
    kinds=frozenset({KIND_CONSUMER}),
    gate=Gate(attributes=frozenset({SPAN_ATTEMPT})),
)
