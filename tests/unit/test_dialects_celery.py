"""The ``celery`` dialect on spans shaped as ``opentelemetry-instrumentation-celery`` 0.66b2
emits them (``opentelemetry/instrumentation/celery/__init__.py``): ``run/<task>`` CONSUMER with
no attributes at its start (``:190-200``); at ``task_postrun`` (``:224-229``) ``celery.action``,
``celery.state``, then the request's ``messaging.message.id``, ``celery.retries`` (not when 0),
``messaging.destination`` (routing key), ``celery.timelimit`` (``utils.py:61-127``) and
``celery.task_name``; ``celery.retry.reason`` at ``task_retry`` (``:355``); status ERROR and an
``exception`` event at ``task_failure`` (``:329-331``); the retry's republish is a PRODUCER
``apply_async/<task>`` child with the same ``messaging.message.id`` (``:256-263``). The values
below are those a real ``task.apply()`` produced with that version installed.
"""

from __future__ import annotations

import json
from typing import Any

from otel_jobsteps._core.dialects.base import KIND_CONSUMER, KIND_INTERNAL, KIND_PRODUCER
from otel_jobsteps._core.dialects.celery import DIALECT
from otel_jobsteps._core.facts import SpanEvent, SpanFacts
from tests.unit.dialect_support import recognised, rows, span

JOB = ("job.domain", "job.id", "job.type", "job.attempt", "job.time_limit", "job.outcome")


def _run(state: str, retries: int = 0, *events: SpanEvent, **extra: Any) -> SpanFacts:
    attributes: dict[str, Any] = {
        "celery.action": "run",
        "celery.state": state,
        "celery.delivery_info": "{'exchange': '', 'routing_key': 'render', 'priority': 0}",
        "messaging.destination": "render",
        "celery.hostname": "celery@vm",
        "messaging.message.id": "t-1",
        "celery.timelimit": ("", "30"),
        "celery.task_name": "app.thumbnail",
        **extra,
    }
    if retries:
        attributes["celery.retries"] = retries
    error = state == "FAILURE"
    return SpanFacts(
        1, 1, 0, "run/app.thumbnail", 10, 90, attributes, events, error, kind=KIND_CONSUMER
    )


def _step(key: str, span_id: int = 2) -> SpanFacts:
    return SpanFacts(1, span_id, 1, key, 20, 30, {"job.step.key": key}, kind=KIND_INTERNAL)


def _job(span: SpanFacts) -> dict[str, Any]:
    return {name: span.attributes.get(name) for name in JOB}


def test_it_claims_a_run_span_at_its_start_by_name_and_kind() -> None:
    assert DIALECT.may_start_job("run/app.thumbnail", KIND_CONSUMER, {})
    assert not DIALECT.may_start_job("run/app.thumbnail", KIND_INTERNAL, {})
    assert not DIALECT.may_start_job("apply_async/app.thumbnail", KIND_PRODUCER, {})


def test_a_successful_run_is_an_attempt_with_its_steps_untouched() -> None:
    step = _step("RENDER")
    job, same = DIALECT.recognise([_run("SUCCESS", retries=2), step])
    assert _job(job) == {
        "job.domain": "render", "job.id": "t-1", "job.type": "app.thumbnail", "job.attempt": 3,
        "job.time_limit": 30.0, "job.outcome": None,
    }  # fmt: skip
    assert not job.error
    assert same is step


def test_self_retry_fails_the_attempt_retry_and_the_republish_is_its_event() -> None:
    reason = "Retry in 5s: OSError('disk full')"
    republish = SpanFacts(
        1, 3, 1, "apply_async/app.thumbnail", 50, 55,
        {"celery.action": "apply_async", "messaging.message.id": "t-1",
         "celery.task_name": "app.thumbnail"},
        kind=KIND_PRODUCER,
    )  # fmt: skip
    job, step, event = DIALECT.recognise(
        [_run("RETRY", 0, **{"celery.retry.reason": reason}), _step("RENDER"), republish]
    )
    assert (job.attributes["job.attempt"], job.attributes["job.outcome"]) == (1, "retry")
    assert job.attributes["job.error"] == reason
    assert "job.event.type" not in step.attributes
    assert event.attributes["job.event.type"] == "RETRY_SCHEDULED"
    assert event.attributes["job.event.message"] == reason
    assert json.loads(event.attributes["job.event.detail"]) == {"next_attempt": 2}


def test_a_failure_is_failed_and_a_soft_time_limit_is_time_limit() -> None:
    boom = SpanEvent("exception", 80, {"exception.type": "ValueError", "exception.message": "no"})
    (failed,) = DIALECT.recognise([_run("FAILURE", 0, boom)])
    assert failed.error
    assert "job.outcome" not in failed.attributes
    late = SpanEvent(
        "exception", 80, {"exception.type": "billiard.exceptions.SoftTimeLimitExceeded"}
    )
    (limited,) = DIALECT.recognise([_run("FAILURE", 0, late)])
    assert limited.attributes["job.outcome"] == "time_limit"


def test_an_expected_failure_the_status_leaves_unset_still_fails() -> None:
    run = _run("FAILURE")
    run.error = False  # the task's `throws` made _trace_failure return early (:317-318)
    (job,) = DIALECT.recognise([run])
    assert job.error


def test_a_run_without_postrun_is_no_job() -> None:
    bare = SpanFacts(1, 1, 0, "run/app.thumbnail", 10, 90, {}, kind=KIND_CONSUMER)
    assert DIALECT.recognise([bare]) == [bare]


def test_the_codes_job_attributes_win() -> None:
    (job,) = DIALECT.recognise([_run("SUCCESS", **{"job.domain": "thumbs", "job.attempt": 7})])
    assert (job.attributes["job.domain"], job.attributes["job.attempt"]) == ("thumbs", 7)
    assert job.attributes["job.id"] == "t-1"


def test_without_a_routing_key_the_domain_is_celery_and_without_limits_none() -> None:
    run = _run("SUCCESS", **{"celery.timelimit": ("", "")})
    run.attributes = {k: v for k, v in run.attributes.items() if k != "messaging.destination"}
    (job,) = DIALECT.recognise([run])
    assert (job.attributes["job.domain"], job.attributes.get("job.time_limit")) == ("celery", None)


def test_the_rows_of_a_retried_run_and_of_a_time_limited_one() -> None:
    reason = "Retry in 5s: OSError('disk full')"
    retried = [
        span(1, 0, "run/app.thumbnail", 0, 100, {**_run("RETRY").attributes,
             "celery.retry.reason": reason}, kind=KIND_CONSUMER),
        span(2, 1, "render", 10, 40, {"job.step.key": "RENDER"}),
        span(3, 1, "apply_async/app.thumbnail", 50, 55, {"messaging.message.id": "t-1"},
             kind=KIND_PRODUCER),
    ]  # fmt: skip
    events, logs = rows(recognised(retried, "celery"))
    assert [(row.type, row.step_key, row.step_status) for row in events] == [
        ("STEP", "RENDER", "COMPLETED"), ("RETRY_SCHEDULED", None, None),
    ]  # fmt: skip
    assert [(log.attempt, log.status, log.reason) for log in logs] == [(1, "FAILED", "retry")]
    limit = SpanEvent("exception", 90, {"exception.type": "billiard.exceptions.TimeLimitExceeded"})
    limited = [span(1, 0, "run/app.thumbnail", 0, 100, _run("FAILURE", 2).attributes,
                    kind=KIND_CONSUMER, error=True, events=[limit])]  # fmt: skip
    _, logs = rows(recognised(limited, "celery"))
    assert [(log.attempt, log.status, log.reason) for log in logs] == [(3, "FAILED", "time_limit")]
