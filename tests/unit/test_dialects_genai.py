"""The ``genai`` dialect on spans shaped as the GenAI semantic conventions define them.

Names and values: opentelemetry-semantic-conventions 0.66b2,
``opentelemetry/semconv/_incubating/attributes/gen_ai_attributes.py`` (``GEN_AI_AGENT_ID`` l.14,
``GEN_AI_AGENT_NAME`` l.19, ``GEN_AI_CONVERSATION_ID`` l.34, ``GEN_AI_OPERATION_NAME`` l.99,
``GEN_AI_REQUEST_MODEL`` l.149, ``GEN_AI_RESPONSE_MODEL`` l.199, ``GEN_AI_TOOL_NAME`` l.259,
``GEN_AI_USAGE_INPUT_TOKENS`` l.284, ``GEN_AI_USAGE_OUTPUT_TOKENS`` l.289,
``GEN_AI_WORKFLOW_NAME`` l.304, ``GenAiOperationNameValues`` l.335). Spans are named
``<operation> <agent, tool or model>``; model calls are CLIENT spans.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from otel_jobsteps._core.dialects.base import KIND_CLIENT
from otel_jobsteps._core.facts import SpanFacts
from tests.unit.dialect_support import by_name, recognised, rows, span, steps

AGENT = {
    "gen_ai.operation.name": "invoke_agent",
    "gen_ai.provider.name": "openai",
    "gen_ai.agent.name": "Researcher",
    "gen_ai.agent.id": "asst_5j66UpCpwteGg4YSxUnt7lPY",
    "gen_ai.conversation.id": "conv_5j66UpCpwteGg4YSxUnt7lPY",
}


def chat(span_id: int, parent: int, start: int, end: int, tokens: tuple[int, int]) -> SpanFacts:
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.response.model": "gpt-4o-2024-08-06",
        "gen_ai.usage.input_tokens": tokens[0],
        "gen_ai.usage.output_tokens": tokens[1],
    }
    return span(
        span_id, parent, f"chat gpt-4o #{span_id}", start, end, attributes, kind=KIND_CLIENT
    )


def tool(
    span_id: int,
    parent: int,
    name: str,
    start: int,
    end: int,
    more: Mapping[str, object] | None = None,
    *,
    error: bool = False,
) -> SpanFacts:
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": f"call_{span_id}",
        "gen_ai.tool.type": "function",
        **(more or {}),
    }
    return span(span_id, parent, f"execute_tool {name}", start, end, attributes, error=error)


def test_an_agent_run_is_a_job_its_tool_and_model_calls_steps() -> None:
    unit = [
        span(0xA1, 0, "invoke_agent Researcher", 0, 100, AGENT),
        chat(2, 0xA1, 10, 30, (120, 30)),
        tool(3, 0xA1, "search", 30, 60),
        chat(4, 0xA1, 60, 90, (300, 80)),
    ]
    spans = recognised(unit)
    job = by_name(spans)["invoke_agent Researcher"]
    assert {k: v for k, v in job.items() if k.startswith("job.")} == {
        "job.domain": "gen_ai",
        "job.id": "00000000000000a1",  # the span's own: gen_ai.agent.id names the agent
        "job.type": "Researcher",
        "job.attempt": 1,
        "job.tag.conversation": "conv_5j66UpCpwteGg4YSxUnt7lPY",
        "job.tag.agent_id": "asst_5j66UpCpwteGg4YSxUnt7lPY",
    }
    events, logs = rows(spans)
    assert steps(events) == [
        ("chat gpt-4o", "COMPLETED", None),
        ("search", "COMPLETED", None),
        ("chat gpt-4o", "COMPLETED", None),
    ]
    assert [row.detail for row in events if row.step_key == "chat gpt-4o"] == [
        {"input_tokens": 120, "output_tokens": 30, "response_model": "gpt-4o-2024-08-06"},
        {"input_tokens": 300, "output_tokens": 80, "response_model": "gpt-4o-2024-08-06"},
    ]
    assert json.loads(by_name(spans)["execute_tool search"]["job.step.detail"]) == {
        "tool_call_id": "call_3", "tool_type": "function",
    }  # fmt: skip
    assert [(log.job_type, log.status) for log in logs] == [("Researcher", "COMPLETED")]


def test_a_failed_tool_fails_its_step_and_what_it_calls_stays_inside_it() -> None:
    unit = [
        span(1, 0, "invoke_agent Researcher", 0, 100, AGENT, error=True),
        tool(2, 1, "fetch", 10, 50, {"error.type": "TimeoutError"}, error=True),
        chat(3, 2, 20, 40, (10, 5)),  # a model call the tool made: part of the tool's step
    ]
    spans = recognised(unit)
    assert "job.step.key" not in by_name(spans)["chat gpt-4o #3"]
    events, logs = rows(spans)
    assert steps(events) == [("fetch", "FAILED", "TimeoutError")]
    assert [(log.status, log.reason) for log in logs] == [("FAILED", "error")]


def test_a_sub_agent_is_a_job_of_its_own() -> None:
    sub_agent = {**AGENT, "gen_ai.agent.name": "Writer", "gen_ai.agent.id": "asst_w"}
    unit = [
        span(1, 0, "invoke_agent Researcher", 0, 100, AGENT),
        tool(2, 1, "delegate", 10, 90),
        span(3, 2, "invoke_agent Writer", 20, 80, sub_agent),
        chat(4, 3, 30, 70, (50, 500)),
    ]
    names = by_name(recognised(unit))
    assert (names["invoke_agent Writer"]["job.type"], names["chat gpt-4o #4"]["job.step.key"]) == (
        "Writer",
        "chat gpt-4o",
    )
    events, logs = rows(recognised(unit))
    assert [(row.job_type, row.step_key) for row in events if row.type == "STEP"] == [
        ("Researcher", "delegate"),
        ("Writer", "chat gpt-4o"),
    ]
    assert sorted(log.job_type or "" for log in logs) == ["Researcher", "Writer"]


def test_a_workflow_and_the_codes_own_attributes() -> None:
    workflow = {"gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "triage"}
    unit = [
        span(1, 0, "invoke_workflow triage", 0, 50, {**workflow, "job.domain": "support"}),
        tool(2, 1, "classify", 10, 20, {"job.step.key": "CLASSIFY"}),
    ]
    names = by_name(recognised(unit))
    assert (
        names["invoke_workflow triage"]["job.type"],
        names["invoke_workflow triage"]["job.domain"],
    ) == (
        "triage",
        "support",
    )
    assert names["execute_tool classify"]["job.step.key"] == "CLASSIFY"


def test_parallel_tool_calls_are_each_a_step() -> None:
    """Overlapping calls are not reordered: the recorder's rule for overlapping steps decides."""
    unit = [
        span(1, 0, "invoke_agent Researcher", 0, 100, AGENT),
        tool(2, 1, "weather", 10, 60),
        tool(3, 1, "news", 12, 40),
    ]
    names = by_name(recognised(unit))
    assert [
        names[name]["job.step.key"] for name in ("execute_tool weather", "execute_tool news")
    ] == [
        "weather",
        "news",
    ]


def test_a_span_claimed_by_its_name_that_ends_as_no_agent_is_left_alone() -> None:
    unit = [span(1, 0, "invoke_agent later", 0, 10, {"gen_ai.operation.name": "chat"})]
    assert recognised(unit) == unit
