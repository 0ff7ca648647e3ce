"""GenAI agents, from the OpenTelemetry GenAI semantic conventions.

Source: the conventions' attribute registry as ``opentelemetry-semantic-conventions`` 0.66b2
ships it (``opentelemetry/semconv/_incubating/attributes/gen_ai_attributes.py``,
``GenAiOperationNameValues``; the GenAI conventions have since moved to their own repository,
under the same names). Every GenAI span says what it does in ``gen_ai.operation.name`` and is
named ``<operation> <subject>`` (``invoke_agent Researcher``, ``execute_tool search``,
``chat gpt-4o``).

- An ``invoke_agent`` or ``invoke_workflow`` span is a job: type ``gen_ai.agent.name`` (or
  ``gen_ai.workflow.name``), domain ``gen_ai``, attempt 1, id the span's own id (16 hex digits):
  ``gen_ai.agent.id`` names the agent, not this run of it, so every run would be one job.
  ``gen_ai.conversation.id`` is the tag ``conversation`` and ``gen_ai.agent.id`` the tag
  ``agent_id`` (searchable: ``?tag=conversation:...``). One nested in it (a sub-agent) is a job
  of its own.
- In a job, the ``execute_tool`` spans are steps keyed by ``gen_ai.tool.name``, and model calls
  (``chat``, ``text_completion``, ``generate_content``, ``embeddings``; ``retrieval``) are steps
  keyed by the operation and model (``chat gpt-4o``), ``gen_ai.usage.input_tokens`` and
  ``output_tokens`` in their detail. A GenAI span inside a step (a model call a tool makes) is
  part of that step, not a step of its own: a step is never opened inside another.

Parallel tool calls overlap: the recorder's rule for steps that overlap applies (a step closed
by a sibling's start that then ends in error is recorded FAILED).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
from .base import Dialect, Gate, with_defaults
from .units import detail_json, nest

__all__ = ["DIALECT"]

OPERATION = "gen_ai.operation.name"
AGENT_NAME = "gen_ai.agent.name"
AGENT_ID = "gen_ai.agent.id"
WORKFLOW_NAME = "gen_ai.workflow.name"
CONVERSATION_ID = "gen_ai.conversation.id"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
DATA_SOURCE_ID = "gen_ai.data_source.id"
ERROR_TYPE = "error.type"
DOMAIN = "gen_ai"

JOB_OPERATIONS = ("invoke_agent", "invoke_workflow")
TOOL_OPERATION = "execute_tool"
MODEL_OPERATIONS = frozenset(
    {"chat", "text_completion", "generate_content", "embeddings", "retrieval"}
)


def _may_start_job(name: str, kind: int, attributes: Mapping[str, Any]) -> bool:
    # `_operation` inline: asked about every span outside a job, on the job's thread.
    operation = attributes.get(OPERATION)
    return (isinstance(operation, str) and operation in JOB_OPERATIONS) or name.startswith(
        JOB_OPERATIONS
    )


def _operation(attributes: Mapping[str, Any]) -> str | None:
    operation = attributes.get(OPERATION)
    return operation if isinstance(operation, str) else None


def _recognise(unit: Sequence[SpanFacts]) -> list[SpanFacts]:
    return nest(unit, _job, _step)


def _job(span: SpanFacts) -> SpanFacts | None:
    """An ``invoke_agent``/``invoke_workflow`` span as a job span; None for any other."""
    attributes = span.attributes
    operation = _operation(attributes)
    if operation not in JOB_OPERATIONS and (operation or not span.name.startswith(JOB_OPERATIONS)):
        return None
    subject = span.name.partition(" ")[2] or None
    values = {
        JOB_DOMAIN: DOMAIN,
        JOB_ID: f"{span.span_id:016x}",
        JOB_TYPE: attributes.get(AGENT_NAME, attributes.get(WORKFLOW_NAME, subject)),
        JOB_ATTEMPT: 1,
        JOB_TAG_PREFIX + "conversation": attributes.get(CONVERSATION_ID),
        JOB_TAG_PREFIX + "agent_id": attributes.get(AGENT_ID),
    }
    return with_defaults(span, values, **_error(span))


def _step(span: SpanFacts) -> SpanFacts | None:
    """A tool call or model call as a step span; None for any other span."""
    attributes = span.attributes
    operation = _operation(attributes)
    subject = span.name.partition(" ")[2] or None
    if operation == TOOL_OPERATION:
        key = attributes.get(TOOL_NAME, subject)
        detail = {
            "tool_call_id": attributes.get(TOOL_CALL_ID),
            "tool_type": attributes.get(TOOL_TYPE),
        }
    elif operation in MODEL_OPERATIONS:
        model = attributes.get(REQUEST_MODEL, attributes.get(DATA_SOURCE_ID, subject))
        key = operation if model is None else f"{operation} {model}"
        detail = {
            "input_tokens": attributes.get(INPUT_TOKENS),
            "output_tokens": attributes.get(OUTPUT_TOKENS),
            "response_model": attributes.get(RESPONSE_MODEL),
        }
    else:
        return None
    values = {
        JOB_STEP_KEY: key or operation,
        JOB_STEP_DETAIL: detail_json(detail),
    }
    return with_defaults(span, values, **_error(span))


def _error(span: SpanFacts) -> dict[str, Any]:
    """A failed span's message from ``error.type`` when its status gives none."""
    error_type = span.attributes.get(ERROR_TYPE)
    if span.error and not span.status_message and error_type is not None:
        return {"status_message": str(error_type)}
    return {}


DIALECT = Dialect(
    name="genai",
    source=(
        "OpenTelemetry GenAI semantic conventions: opentelemetry-semantic-conventions 0.66b2, "
        "opentelemetry/semconv/_incubating/attributes/gen_ai_attributes.py"
    ),
    may_start_job=_may_start_job,
    recognise=_recognise,
    gate=Gate(attributes=frozenset({OPERATION}), prefixes=JOB_OPERATIONS),
)
