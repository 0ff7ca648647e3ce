"""The ``dbos`` dialect on spans shaped as dbos 3.4.0 (PyPI) emits them.

``dbos/_tracer.py`` l.106-124 (``start_span``: the span started with its name only, then each
attribute set; legacy names, or ``_LEGACY_TO_SEMCONV`` l.29-39 with ``otel_attribute_format:
semconv``); ``dbos/_context.py`` l.382-423 (``operationUUID`` = the workflow id; status OK, or
ERROR with ``str(exc)``); ``dbos/_core.py`` l.1176-1180 (a workflow: its function's name,
``operationType = "workflow"``, ``queueName``) and l.2427-2430 (a step: ``operationType =
"step"``).
"""

from __future__ import annotations

from otel_jobsteps._core.dialects import select_dialects
from tests.unit.dialect_support import recognised, rows, span, steps

COMMON = {"applicationVersion": "5e1f", "executorID": "local", "authenticatedUserRoles": ""}
WORKFLOW = {**COMMON, "operationUUID": "wf-9", "operationType": "workflow", "queueName": "orders"}
STEP = {**COMMON, "operationUUID": "wf-9", "operationType": "step"}


def test_a_workflow_is_a_job_and_its_steps_are_steps() -> None:
    unit = [
        span(1, 0, "checkout", 0, 100, WORKFLOW, error=True, message="payment refused"),
        span(2, 1, "reserve_stock", 10, 30, STEP),
        span(3, 1, "charge_card", 30, 90, STEP, error=True, message="payment refused"),
        span(4, 3, "POST /charges", 40, 80, {"http.request.method": "POST"}),
    ]
    (job, *_) = spans = recognised(unit)
    assert {k: v for k, v in job.attributes.items() if k.startswith("job.")} == {
        "job.domain": "orders",
        "job.id": "wf-9",
        "job.type": "checkout",
        "job.attempt": 1,
    }
    events, logs = rows(spans)
    assert steps(events) == [
        ("reserve_stock", "COMPLETED", None),
        ("charge_card", "FAILED", "payment refused"),
    ]
    assert [(log.status, log.reason) for log in logs] == [("FAILED", "error")]


def test_semconv_names_and_a_child_workflow() -> None:
    semconv = {"dbos.operation.workflow_id": "wf-1", "dbos.operation.type": "workflow"}
    child = {"dbos.operation.workflow_id": "wf-1-0", "dbos.operation.type": "workflow"}
    unit = [
        span(1, 0, "parent", 0, 100, semconv),
        span(2, 1, "child", 10, 90, child),
        span(3, 2, "step", 20, 80, {"dbos.operation.type": "step"}),
    ]
    events, logs = rows(recognised(unit))
    assert [(row.job_id, row.step_key) for row in events if row.type == "STEP"] == [
        ("wf-1-0", "step")
    ]
    assert sorted(log.job_id for log in logs) == ["wf-1", "wf-1-0"]
    assert [log.domain for log in logs] == ["dbos", "dbos"]


def test_at_its_start_a_dbos_span_names_nothing() -> None:
    """DBOS sets its attributes after starting the span: only an ended one can be claimed."""
    assert select_dialects("dbos").may_start_job("checkout", 1, {}) is None


def test_the_codes_job_attributes_win() -> None:
    unit = [
        span(1, 0, "checkout", 0, 100, {**WORKFLOW, "job.type": "Checkout"}),
        span(2, 1, "reserve_stock", 10, 30, {**STEP, "job.step.key": "RESERVE"}),
    ]
    (job, step) = recognised(unit)
    assert (job.attributes["job.type"], step.attributes["job.step.key"]) == ("Checkout", "RESERVE")
