"""Every dialect on spans whose attributes hold what no source emits (bytes, lists, huge ints,
control characters): it gives them meaning or leaves them, and never raises on the job's thread."""

from __future__ import annotations

from typing import Any

import pytest

from otel_jobsteps._core.dialects import DIALECT_NAMES, select_dialects
from otel_jobsteps._core.dialects.base import KIND_CLIENT, KIND_CONSUMER, KIND_SERVER
from tests.unit.dialect_support import rows, span

ODD: list[Any] = [b"\xff\x00", ["a", "b"], 10**40, "\x1b[2J\u202e", -1, 0, True, 1.5, ""]
NAMES = (
    "run/task", "RunWorkflow:W", "RunActivity:A", "hatchet.start_step_run", "Attempt 2",
    "invoke_agent X", "execute_tool t", "chat m", "x process",
)  # fmt: skip
KEYS = (
    "messaging.message.id", "messaging.system", "messaging.destination", "oban.job.job_id",
    "oban.job.attempt", "oban.job.max_attempts", "$span.attempt", "$metadata.ctx.run.id",
    "$metadata.ctx.attempt.number", "hatchet.step_run_id", "hatchet.retry_count",
    "temporalWorkflowID", "gen_ai.operation.name", "gen_ai.tool.name",
    "gen_ai.usage.input_tokens", "cicd.pipeline.name", "cicd.pipeline.run.id",
    "cicd.pipeline.task.name", "cicd.pipeline.task.run.id", "cicd.pipeline.task.run.result",
    "operationType", "operationUUID", "celery.action", "celery.retries", "bullmq.job.id",
    "bullmq.queue.operation",
)  # fmt: skip


@pytest.mark.parametrize("value", ODD, ids=repr)
@pytest.mark.parametrize("name", NAMES)
def test_odd_values_never_raise(name: str, value: object) -> None:
    attributes = dict.fromkeys(KEYS, value)
    valid = {
        "gen_ai.operation.name": "invoke_agent",
        "operationType": "workflow",
        "messaging.system": "oban",
        "$span.attempt": True,
    }
    for kind in (KIND_SERVER, KIND_CONSUMER, KIND_CLIENT):
        for root in ({**attributes}, {**attributes, **valid}):
            unit = [
                span(1, 0, name, 0, 100, root, kind=kind),
                span(2, 1, "execute_tool t", 10, 20, attributes, kind=kind),
                span(3, 1, "step", 20, 30, {**attributes, "operationType": "step"}),
            ]
            mapped = select_dialects(list(DIALECT_NAMES)).recognise(unit)
            assert [each.span_id for each in mapped] == [1, 2, 3]
            rows(mapped, problems=[])  # the translation takes (or counts) what they made
