"""The ``hatchet`` dialect on spans shaped as hatchet-sdk 1.43.1's instrumentor emits them.

``hatchet_sdk/opentelemetry/instrumentor.py``: ``hatchet.start_step_run`` CONSUMER per run of a
task (l.487-522; exception event and status ERROR ``str(exc)`` when it failed), its attributes
from ``hatchet_sdk/runnables/action.py`` ``get_otel_attributes`` (l.113-145: ``hatchet.<name>``
for each truthy value, so no ``hatchet.retry_count`` on the first run; ``instrumentor =
"hatchet"``), copied onto every span inside by ``_HatchetAttributeSpanProcessor`` (l.123-137);
a cancellation is its own ``hatchet.cancel_step_run`` span (l.524-541).
"""

from __future__ import annotations

from otel_jobsteps._core.dialects import select_dialects
from otel_jobsteps._core.dialects.base import KIND_CONSUMER
from otel_jobsteps._core.facts import SpanFacts
from tests.unit.dialect_support import recognised, rows, span, steps

RUN = {
    "instrumentor": "hatchet",
    "hatchet.tenant_id": "707d0855-80ab-4e1f-a156-f1c4546cbf52",
    "hatchet.worker_id": "a9c1",
    "hatchet.workflow_run_id": "wr-51",
    "hatchet.step_id": "s-1",
    "hatchet.step_run_id": "sr-77",
    "hatchet.payload": '{"input": {}}',
    "hatchet.workflow_name": "onboarding",
    "hatchet.action_name": "onboarding:send_email",
    "hatchet.step_name": "send_email",
}


def task_run(retries: int, *, error: str | None = None) -> list[SpanFacts]:
    attributes = {**RUN, **({"hatchet.retry_count": retries} if retries else {})}
    return [
        span(1, 0, "hatchet.start_step_run", 0, 100, attributes, kind=KIND_CONSUMER,
             error=error is not None, message=error),
        span(2, 1, "render", 10, 40, {**attributes, "job.step.key": "RENDER"}),
        span(3, 1, "smtp", 40, 90, {**attributes, "job.step.key": "SEND"},
             error=error is not None, message=error),
    ]  # fmt: skip


def test_a_task_run_is_a_job_whose_first_run_has_no_retry_count() -> None:
    (job, *_) = spans = recognised(task_run(0))
    assert {k: v for k, v in job.attributes.items() if k.startswith("job.")} == {
        "job.domain": "onboarding",
        "job.id": "sr-77",
        "job.type": "send_email",
        "job.attempt": 1,
        "job.tag.workflow_run": "wr-51",
    }
    events, logs = rows(spans)
    assert steps(events) == [("RENDER", "COMPLETED", None), ("SEND", "COMPLETED", None)]
    assert [(log.attempt, log.status) for log in logs] == [(1, "COMPLETED")]


def test_a_retry_is_its_own_attempt() -> None:
    events, logs = rows(recognised(task_run(2, error="ConnectionError: smtp down")))
    assert steps(events) == [
        ("RENDER", "COMPLETED", None),
        ("SEND", "FAILED", "ConnectionError: smtp down"),
    ]
    assert [(log.attempt, log.status, log.reason) for log in logs] == [(3, "FAILED", "error")]


def test_only_the_run_span_is_claimed_and_the_codes_job_attributes_win() -> None:
    selected = select_dialects("hatchet")
    assert selected.may_start_job("render", 1, RUN) is None  # a span inside: attributes copied
    cancel = {"instrumentor": "hatchet", "hatchet.step_run_id": "sr-77"}
    assert selected.may_start_job("hatchet.cancel_step_run", KIND_CONSUMER, cancel) is None
    (root, *rest) = task_run(0)
    root.attributes = {**root.attributes, "job.domain": "mail"}
    (job, *_) = recognised([root, *rest])
    assert job.attributes["job.domain"] == "mail"
