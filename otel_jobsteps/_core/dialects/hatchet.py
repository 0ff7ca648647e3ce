"""Hatchet, from its Python SDK's instrumentor (``hatchet-sdk`` 1.43.1).

Source: ``hatchet_sdk/opentelemetry/instrumentor.py`` (``_wrap_handle_start_step_run``) and
``hatchet_sdk/runnables/action.py`` (``Action.get_otel_attributes``). Each run of a task is a
CONSUMER span ``hatchet.start_step_run`` (``hatchet.start_step_run.<action id>`` with
``include_task_name_in_start_step_run_span_name``) holding ``instrumentor = "hatchet"`` and,
from its start, ``hatchet.step_run_id`` (the task run, the same across its retries),
``hatchet.step_name``, ``hatchet.workflow_name``, ``hatchet.workflow_run_id`` and
``hatchet.retry_count``. Attributes whose value is falsy are left out, so the first run has no
``hatchet.retry_count``. A task that raised ends with an ``exception`` event and status ERROR.

The span is the job: domain ``hatchet.workflow_name`` (``hatchet`` without it), id
``hatchet.step_run_id``, type ``hatchet.step_name``, attempt ``hatchet.retry_count + 1`` (1
without it), tag ``workflow_run`` = ``hatchet.workflow_run_id``. Its steps are the spans the
code marks with ``job.step.key``: Hatchet's spans inside a task (its processor copies the
``hatchet.*`` attributes onto every one) name no step. A cancellation is a separate span
``hatchet.cancel_step_run``, outside the run: the run itself ends as the code lets it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...attributes import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID, JOB_TAG_PREFIX, JOB_TYPE
from ..facts import SpanFacts
from .base import KIND_CONSUMER, Dialect, Gate, number, with_defaults

__all__ = ["DIALECT"]

SPAN_NAME = "hatchet.start_step_run"
STEP_RUN_ID = "hatchet.step_run_id"
STEP_NAME = "hatchet.step_name"
ACTION_NAME = "hatchet.action_name"
WORKFLOW_NAME = "hatchet.workflow_name"
WORKFLOW_RUN_ID = "hatchet.workflow_run_id"
RETRY_COUNT = "hatchet.retry_count"


def _may_start_job(name: str, kind: int, attributes: Mapping[str, Any]) -> bool:
    return kind == KIND_CONSUMER and name.startswith(SPAN_NAME)


def _recognise(unit: Sequence[SpanFacts]) -> list[SpanFacts]:
    root = unit[0]
    attributes = root.attributes
    step_run_id = attributes.get(STEP_RUN_ID)
    retries = number(attributes.get(RETRY_COUNT, 0))
    if not step_run_id or retries is None:
        return list(unit)
    job = {
        JOB_DOMAIN: attributes.get(WORKFLOW_NAME) or "hatchet",
        JOB_ID: str(step_run_id),
        JOB_TYPE: attributes.get(STEP_NAME) or attributes.get(ACTION_NAME),
        JOB_ATTEMPT: retries + 1,
        JOB_TAG_PREFIX + "workflow_run": attributes.get(WORKFLOW_RUN_ID),
    }
    return [with_defaults(root, job), *unit[1:]]


DIALECT = Dialect(
    name="hatchet",
    source=(
        "hatchet-sdk 1.43.1: hatchet_sdk/opentelemetry/instrumentor.py, "
        "hatchet_sdk/runnables/action.py"
    ),
    may_start_job=_may_start_job,
    recognise=_recognise,
    kinds=frozenset({KIND_CONSUMER}),
    gate=Gate(prefixes=(SPAN_NAME,)),
)
