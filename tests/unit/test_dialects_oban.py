"""The ``oban`` dialect on spans shaped as ``opentelemetry_oban`` is documented to emit them.

Its source (Hex: ``lib/opentelemetry_oban/job_handler.ex``) is not reachable from here, so the
shape is the documented one, unverified: ``<worker> process`` CONSUMER with ``messaging.system =
"oban"``, the queue in ``messaging.destination.name`` (older: ``messaging.destination``) and
``oban.job.job_id``, ``oban.job.worker``, ``oban.job.attempt``, ``oban.job.max_attempts`` (older:
``messaging.oban.*``); an exception recorded with status ERROR.
"""

from __future__ import annotations

from otel_jobsteps._core.dialects.base import KIND_CONSUMER
from otel_jobsteps._core.facts import SpanFacts
from tests.unit.dialect_support import recognised, rows, span, steps

JOB = {
    "messaging.system": "oban",
    "messaging.destination.name": "mailers",
    "messaging.operation.type": "process",
    "oban.job.job_id": 123,
    "oban.job.worker": "MyApp.Workers.Mailer",
    "oban.job.priority": 0,
    "oban.job.attempt": 2,
    "oban.job.max_attempts": 3,
    "oban.job.inserted_at": "2026-12-07T21:00:00Z",
    "oban.job.scheduled_at": "2026-12-07T21:00:00Z",
}


def run(attributes: dict[str, object], *, error: bool) -> list[SpanFacts]:
    message = "RuntimeError: smtp down" if error else None
    return [
        span(1, 0, "MyApp.Workers.Mailer process", 0, 100, attributes, kind=KIND_CONSUMER,
             error=error, message=message),
        span(2, 1, "deliver", 10, 90, {"job.step.key": "DELIVER"}, error=error, message=message),
    ]  # fmt: skip


def test_a_job_run_is_an_attempt_and_a_failure_with_attempts_left_a_retry() -> None:
    (job, *_) = spans = recognised(run(JOB, error=True))
    assert {k: v for k, v in job.attributes.items() if k.startswith("job.")} == {
        "job.domain": "mailers",
        "job.id": "123",
        "job.type": "MyApp.Workers.Mailer",
        "job.attempt": 2,
        "job.outcome": "retry",
    }
    events, logs = rows(spans)
    assert steps(events) == [("DELIVER", "FAILED", "RuntimeError: smtp down")]
    assert [(log.attempt, log.status, log.reason) for log in logs] == [(2, "FAILED", "retry")]


def test_the_last_attempt_fails_as_an_error_and_older_names_are_read() -> None:
    older = {
        "messaging.system": "oban",
        "messaging.destination": "mailers",
        "messaging.oban.job_id": 123,
        "messaging.oban.worker": "MyApp.Workers.Mailer",
        "messaging.oban.attempt": 3,
        "messaging.oban.max_attempts": 3,
    }
    (job, *_) = spans = recognised(run(older, error=True))
    assert (job.attributes["job.domain"], job.attributes["job.attempt"]) == ("mailers", 3)
    assert [(log.status, log.reason) for log in rows(spans)[1]] == [("FAILED", "error")]
    (job, *_) = recognised(run(older, error=False))
    assert "job.outcome" not in job.attributes


def test_the_codes_job_attributes_win() -> None:
    (job, *_) = recognised(run({**JOB, "job.outcome": "target_deleted"}, error=True))
    assert job.attributes["job.outcome"] == "target_deleted"
