"""The ``cicd`` dialect on spans shaped as the CI/CD semantic conventions define them.

Names and values: opentelemetry-semantic-conventions 0.66b2,
``opentelemetry/semconv/_incubating/attributes/cicd_attributes.py`` (``CICD_PIPELINE_NAME`` l.12,
``CICD_PIPELINE_RESULT`` l.17, ``CICD_PIPELINE_RUN_ID`` l.22, ``CICD_PIPELINE_TASK_NAME`` l.37,
``CICD_PIPELINE_TASK_RUN_ID`` l.42, ``CICD_PIPELINE_TASK_RUN_RESULT`` l.48,
``CicdPipelineTaskRunResultValues`` l.122: success, failure, error, timeout, cancellation, skip).
A pipeline run span ``<action> <pipeline>``, its task runs named after the task.
"""

from __future__ import annotations

import json

from otel_jobsteps._core.dialects.base import KIND_SERVER
from otel_jobsteps._core.dialects.cicd import STEP_SKIPPED
from otel_jobsteps._core.facts import SpanFacts
from tests.unit.dialect_support import by_name, recognised, rows, span, steps

PIPELINE = {"cicd.pipeline.name": "deploy", "cicd.pipeline.run.id": "run-7"}


def task(
    span_id: int, parent: int, name: str, start: int, end: int, result: str, **more: object
) -> SpanFacts:
    """A task run as the conventions name it, its run id ``t<span id>``."""
    attributes = {
        "cicd.pipeline.task.name": name,
        "cicd.pipeline.task.run.id": f"t{span_id}",
        "cicd.pipeline.task.run.result": result,
        **more,
    }
    return span(span_id, parent, name, start, end, attributes)


def test_a_pipeline_of_tasks_is_a_job_with_its_tasks_as_steps() -> None:
    unit = [
        span(1, 0, "RUN deploy", 0, 100, {**PIPELINE, "cicd.pipeline.result": "failure"},
             kind=KIND_SERVER),
        task(2, 1, "build", 10, 20, "success", **{"cicd.pipeline.task.type": "build"}),
        task(3, 1, "lint", 20, 21, "skip"),
        task(4, 1, "test", 30, 60, "failure", **{"error.type": "AssertionError"}),
    ]  # fmt: skip
    spans = recognised(unit)
    names = by_name(spans)
    assert {k: v for k, v in names["RUN deploy"].items() if k.startswith("job.")} == {
        "job.domain": "deploy",
        "job.id": "run-7",
        "job.type": "deploy",
        "job.attempt": 1,
    }
    assert json.loads(names["build"]["job.step.detail"]) == {
        "task_run_id": "t2", "task_type": "build", "result": "success",
    }  # fmt: skip
    assert names["lint"][STEP_SKIPPED] is True
    assert STEP_SKIPPED not in names["build"]
    events, logs = rows(spans)
    assert steps(events) == [
        ("build", "COMPLETED", None),
        ("lint", "SKIPPED", None),
        ("test", "FAILED", "AssertionError"),
    ]
    assert [(log.job_id, log.status, log.reason) for log in logs] == [("run-7", "FAILED", "error")]


def test_the_level_that_holds_the_innermost_tasks_is_the_job() -> None:
    """GitHub Actions' shape: a pipeline of CI jobs of steps: one job per CI job, its id within
    the pipeline run; a timeout and a cancellation are the outcomes the model knows."""
    unit = [
        span(1, 0, "RUN deploy", 0, 100, PIPELINE, kind=KIND_SERVER),
        task(2, 1, "unit", 1, 50, "timeout"),
        task(3, 2, "checkout", 2, 5, "success"),
        task(4, 2, "pytest", 5, 49, "timeout"),
        task(5, 1, "e2e", 51, 99, "cancellation"),
        task(6, 5, "playwright", 52, 98, "cancellation"),
    ]
    names = by_name(recognised(unit))
    assert "job.id" not in names["RUN deploy"]
    assert (names["unit"]["job.id"], names["unit"]["job.outcome"]) == ("run-7/t2", "time_limit")
    assert (names["e2e"]["job.id"], names["e2e"]["job.outcome"]) == ("run-7/t5", "cancelled")
    assert names["pytest"]["job.error"] == "timeout"
    events, logs = rows(recognised(unit))
    assert steps(events) == [
        ("checkout", "COMPLETED", None),
        ("pytest", "FAILED", "timeout"),
        ("playwright", "FAILED", "cancellation"),
    ]
    assert [(log.job_id, log.status, log.reason) for log in logs] == [
        ("run-7/t2", "FAILED", "time_limit"),
        ("run-7/t5", "FAILED", "cancelled"),
    ]


def test_the_pipeline_identity_may_live_on_the_resource() -> None:
    resource = {"cicd.pipeline.run.id": "gh-99", "cicd.pipeline.name": "release"}
    unit = [
        span(1, 0, "release", 0, 50, {"cicd.pipeline.name": "release"}, resource=resource),
        task(2, 1, "publish", 10, 40, "success"),
    ]
    names = by_name(recognised(unit))
    assert (names["release"]["job.id"], names["release"]["job.domain"]) == ("gh-99", "release")


def test_a_result_decides_whatever_the_status_and_the_codes_job_attributes_win() -> None:
    unit = [
        span(1, 0, "RUN deploy", 0, 100,
             {**PIPELINE, "job.domain": "ci", "cicd.pipeline.result": "success"}, error=True),
        task(2, 1, "build", 10, 20, "success", **{"job.step.key": "BUILD"}),
    ]  # fmt: skip
    spans = recognised(unit)
    assert by_name(spans)["RUN deploy"]["job.domain"] == "ci"
    events, logs = rows(spans)
    assert steps(events) == [("BUILD", "COMPLETED", None)]
    assert [(log.domain, log.status) for log in logs] == [("ci", "COMPLETED")]


def test_no_job_without_steps_a_run_id_or_when_skipped() -> None:
    lone = [task(1, 0, "build", 0, 10, "success")]
    nameless = [
        span(1, 0, "RUN x", 0, 50, {"cicd.pipeline.name": "x"}),
        task(2, 1, "a", 1, 2, "success"),
    ]
    skipped = [
        span(1, 0, "RUN deploy", 0, 50, {**PIPELINE, "cicd.pipeline.result": "skip"}),
        task(2, 1, "build", 1, 2, "skip"),
    ]
    for unit in (lone, nameless, skipped):
        assert recognised(unit) == unit
