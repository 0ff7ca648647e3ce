"""The ``trigger`` dialect on spans shaped as @trigger.dev/core 4.8.3 (npm) emits them.

``dist/esm/v3/workers/taskExecutor.js``: the attempt span ``Attempt <n>``, CONSUMER, with
``$span.attempt = true`` and ``$entity.type = "attempt"`` (l.38, l.144-160), ``exception`` event
and status ERROR when the run failed (``dist/esm/v3/otel/utils.js`` l.28-39);
``dist/esm/v3/taskContext/otelProcessors.js`` l.14-16: every span of the task stamped with the
context flattened under ``$metadata`` (``dist/esm/v3/taskContext/index.js`` l.93-107:
``ctx.attempt.number``, ``ctx.task.id``, ``ctx.queue.name``, ``ctx.run.id``, ...), and a partial
copy of each span at its start with ``$span.partial = true`` (l.53-70).
"""

from __future__ import annotations

from otel_jobsteps._core.dialects import select_dialects
from otel_jobsteps._core.dialects.base import KIND_CONSUMER, KIND_INTERNAL
from tests.unit.dialect_support import recognised, rows, span, steps

ATTEMPT = {"$style.icon": "attempt", "$entity.type": "attempt", "$span.attempt": True}
CONTEXT = {
    "$metadata.ctx.attempt.number": 2,
    "$metadata.ctx.task.id": "resize-image",
    "$metadata.ctx.task.filePath": "src/trigger/resize.ts",
    "$metadata.ctx.queue.name": "task/resize-image",
    "$metadata.ctx.run.id": "run_cm4x9",
    "$metadata.ctx.run.isTest": False,
    "$metadata.worker.id": "worker_1",
    "$metadata.warm_start": True,
}


def test_an_attempt_span_is_the_job_its_context_read_at_its_end() -> None:
    unit = [
        span(1, 0, "Attempt 2", 0, 100, {**ATTEMPT, **CONTEXT}, kind=KIND_CONSUMER, error=True,
             message="Error: image too large"),
        span(2, 1, "run()", 5, 95, {"$style.icon": "task-fn-run", **CONTEXT}),
        span(3, 2, "resize", 10, 90, {**CONTEXT, "job.step.key": "RESIZE"}, error=True,
             message="Error: image too large"),
    ]  # fmt: skip
    assert select_dialects("trigger").may_start_job("Attempt 2", KIND_CONSUMER, ATTEMPT)
    (job, *_) = spans = recognised(unit)
    assert {k: v for k, v in job.attributes.items() if k.startswith("job.")} == {
        "job.domain": "task/resize-image",
        "job.id": "run_cm4x9",
        "job.type": "resize-image",
        "job.attempt": 2,
    }
    events, logs = rows(spans)
    assert steps(events) == [("RESIZE", "FAILED", "Error: image too large")]
    assert [(log.attempt, log.status) for log in logs] == [(2, "FAILED")]


def test_version_3_names_and_the_attempt_from_the_span_name() -> None:
    v3 = {"ctx.run.id": "run_1", "ctx.task.id": "t", "ctx.queue.name": "q"}
    (job,) = recognised([span(1, 0, "Attempt 3", 0, 9, {**ATTEMPT, **v3}, kind=KIND_CONSUMER)])
    assert (job.attributes["job.id"], job.attributes["job.attempt"]) == ("run_1", 3)


def test_the_partial_copy_and_a_span_without_a_run_are_no_job() -> None:
    partial = {**ATTEMPT, **CONTEXT, "$span.partial": True}
    trigger = select_dialects("trigger")
    assert trigger.may_start_job("Attempt 2", KIND_INTERNAL, partial) is None
    assert trigger.may_start_job("Attempt 2", KIND_CONSUMER, partial) is None
    lone = [span(1, 0, "Attempt 1", 0, 9, ATTEMPT, kind=KIND_CONSUMER)]
    assert recognised(lone) == lone


def test_the_codes_job_attributes_win() -> None:
    mine = {**ATTEMPT, **CONTEXT, "job.domain": "images", "job.type": "resize"}
    (job,) = recognised([span(1, 0, "Attempt 2", 0, 9, mine, kind=KIND_CONSUMER)])
    assert (job.attributes["job.domain"], job.attributes["job.type"]) == ("images", "resize")
    assert job.attributes["job.id"] == "run_cm4x9"
