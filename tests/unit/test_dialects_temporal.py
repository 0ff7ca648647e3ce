"""The ``temporal`` dialect on spans shaped as temporalio 1.35.0's tracing emits them.

``temporalio/contrib/opentelemetry/_otel_interceptor.py`` (``OpenTelemetryPlugin(
add_temporal_spans=True)``): ``RunWorkflow:<type>`` SERVER with ``temporalWorkflowID`` and
``temporalRunID`` (l.419-438), lasting while the workflow runs; ``StartActivity:<type>`` CLIENT
in it, ended once scheduled (l.509-523); ``RunActivity:<type>`` SERVER under it, one per attempt,
with ``temporalActivityID`` (l.331-346), status ERROR ``<type>: <message>`` on failure
(l.136-150). ``_interceptor.py`` (``TracingInterceptor``): ``RunWorkflow`` started and ended at
once (``_completed_workflow_span``, l.222-262), ``RunActivity`` with ``temporalActivityID`` first
(l.369-381).
"""

from __future__ import annotations

from otel_jobsteps._core.dialects.base import KIND_CLIENT, KIND_SERVER
from otel_jobsteps._core.facts import SpanFacts
from tests.unit.dialect_support import by_name, recognised, rows, span, steps

IDS = {"temporalWorkflowID": "order-1", "temporalRunID": "9b2f"}


def run_activity(
    span_id: int, parent: int, start: int, end: int, error: str | None = None
) -> SpanFacts:
    kind = "charge" if parent == 2 else "ship"
    return span(
        span_id, parent, f"RunActivity:{kind}", start, end,
        {**IDS, "temporalActivityID": str(parent - 1)},
        kind=KIND_SERVER, error=error is not None, message=error,
    )  # fmt: skip


def test_a_workflow_is_a_job_and_every_activity_attempt_a_step_row_in_order() -> None:
    unit = [
        span(1, 0, "RunWorkflow:OrderWorkflow", 0, 1000, IDS, kind=KIND_SERVER),
        span(2, 1, "StartActivity:charge", 10, 11, IDS, kind=KIND_CLIENT),
        run_activity(3, 2, 20, 30, "ValueError: card declined"),
        run_activity(4, 2, 130, 140, "ValueError: card declined"),
        run_activity(5, 2, 340, 350),
        span(6, 1, "StartActivity:ship", 360, 361, IDS, kind=KIND_CLIENT),
        run_activity(7, 6, 370, 380),
    ]
    spans = recognised(unit)
    workflow = by_name(spans)["RunWorkflow:OrderWorkflow"]
    assert {k: v for k, v in workflow.items() if k.startswith("job.")} == {
        "job.domain": "temporal",
        "job.id": "order-1",
        "job.type": "OrderWorkflow",
        "job.attempt": 1,
        "job.tag.run": "9b2f",
    }
    events, logs = rows(spans)
    assert steps(events) == [
        ("charge", "FAILED", "ValueError: card declined"),
        ("charge", "FAILED", "ValueError: card declined"),
        ("charge", "COMPLETED", None),
        ("ship", "COMPLETED", None),
    ]
    assert next(row.detail for row in events if row.type == "STEP") == {"activity_id": "1"}
    assert [(log.job_id, log.status) for log in logs] == [("order-1", "COMPLETED")]


def test_the_tracing_interceptors_instant_workflow_span_is_no_job() -> None:
    unit = [span(1, 0, "RunWorkflow:OrderWorkflow", 5, 5, IDS, kind=KIND_SERVER)]
    assert recognised(unit) == unit


def test_an_activity_outside_its_workflow_is_a_job_of_its_own() -> None:
    """Attempt 1 unless the code names it: no attribute says which attempt a span is."""
    alone = span(3, 99, "RunActivity:charge", 20, 30, {"temporalActivityID": "1", **IDS},
                 kind=KIND_SERVER)  # fmt: skip
    (job,) = recognised([alone])
    assert {k: v for k, v in job.attributes.items() if k.startswith("job.")} == {
        "job.domain": "temporal",
        "job.id": "order-1/1",
        "job.type": "charge",
        "job.attempt": 1,
        "job.tag.run": "9b2f",
    }
    named = span(3, 99, "RunActivity:charge", 20, 30, {**alone.attributes, "job.attempt": 3},
                 kind=KIND_SERVER)  # fmt: skip
    (job,) = recognised([named])
    assert job.attributes["job.attempt"] == 3


def test_an_activity_already_a_step_of_its_workflows_unit_is_not_a_job_again() -> None:
    """collect reads a RunActivity's ended copy again once its workflow's unit made it a step."""
    step = span(3, 2, "RunActivity:charge", 20, 30,
                {**IDS, "temporalActivityID": "1", "job.step.key": "charge"},
                kind=KIND_SERVER)  # fmt: skip
    assert recognised([step]) == [step]
