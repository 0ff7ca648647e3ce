"""The ``sidekiq`` dialect on spans shaped as opentelemetry-instrumentation-sidekiq is documented
to emit them.

Its source (RubyGems: ``lib/opentelemetry/instrumentation/sidekiq/middlewares/server/
tracer_middleware.rb``) is not reachable from here, so the shape is the documented one,
unverified: ``<queue> process`` CONSUMER with ``messaging.system = "sidekiq"``,
``messaging.sidekiq.job_class``, ``messaging.message_id`` (the jid), ``messaging.destination``,
``messaging.destination_kind = "queue"``, ``messaging.operation = "process"``; events
``created_at`` and ``enqueued_at``; an exception recorded with status ERROR.
"""

from __future__ import annotations

from otel_jobsteps._core.dialects.base import KIND_CONSUMER
from otel_jobsteps._core.facts import SpanEvent
from tests.unit.dialect_support import recognised, rows, span, steps
from tests.unit.recorder_support import MS

JOB = {
    "messaging.system": "sidekiq",
    "messaging.sidekiq.job_class": "HardWorker",
    "messaging.message_id": "b4a577edbccf1d805744efa9",
    "messaging.destination": "default",
    "messaging.destination_kind": "queue",
    "messaging.operation": "process",
}
EVENTS = (SpanEvent("created_at", 0, {}), SpanEvent("enqueued_at", 1 * MS, {}))


def test_a_job_run_is_attempt_one_unless_the_code_names_it() -> None:
    unit = [
        span(1, 0, "default process", 5, 100, JOB, kind=KIND_CONSUMER, events=EVENTS),
        span(2, 1, "resize", 10, 90, {"job.step.key": "RESIZE"}),
    ]
    (job, *_) = spans = recognised(unit)
    assert {k: v for k, v in job.attributes.items() if k.startswith("job.")} == {
        "job.domain": "default",
        "job.id": "b4a577edbccf1d805744efa9",
        "job.type": "HardWorker",
        "job.attempt": 1,
    }
    events, logs = rows(spans)
    assert steps(events) == [("RESIZE", "COMPLETED", None)]
    assert [(log.attempt, log.status) for log in logs] == [(1, "COMPLETED")]
    retried = span(1, 0, "HardWorker process", 5, 100, {**JOB, "job.attempt": 3},
                   kind=KIND_CONSUMER)  # fmt: skip
    (job,) = recognised([retried])
    assert job.attributes["job.attempt"] == 3


def test_newer_names_are_read() -> None:
    newer = {
        "messaging.system": "sidekiq",
        "messaging.sidekiq.job_class": "HardWorker",
        "messaging.message.id": "jid-2",
        "messaging.destination.name": "critical",
    }
    (job,) = recognised([span(1, 0, "critical process", 0, 9, newer, kind=KIND_CONSUMER)])
    assert (job.attributes["job.id"], job.attributes["job.domain"]) == ("jid-2", "critical")
