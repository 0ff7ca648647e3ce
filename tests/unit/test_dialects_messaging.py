"""The ``messaging`` dialect on consumer spans shaped as the conventions and their
instrumentations emit them.

pika: ``opentelemetry-instrumentation-pika`` 0.66b1, ``opentelemetry/instrumentation/pika/utils.py``
``_decorate_callback`` (``:53-94``: the callback runs inside the span), ``_get_span`` (``:137-155``:
started with a name and CONSUMER only) and ``_enrich_span`` (``:164-191``); the attributes below
are those a real ``basic_consume`` against the local RabbitMQ produced. Current conventions
(``opentelemetry-semantic-conventions`` 0.66b2): ``messaging.operation.type = "process"``,
``messaging.destination.name``, ``messaging.gcp_pubsub.message.delivery_attempt``,
``messaging.servicebus.message.delivery_count``.
"""

from __future__ import annotations

from typing import Any

import pytest

from otel_jobsteps._core.dialects import select_dialects
from otel_jobsteps._core.dialects.base import KIND_CONSUMER, KIND_INTERNAL, KIND_PRODUCER
from otel_jobsteps._core.dialects.messaging import DIALECT
from otel_jobsteps._core.facts import SpanFacts
from tests.unit.dialect_support import recognised, rows, span

PIKA = {
    "messaging.system": "rabbitmq",
    "messaging.operation": "receive",
    "messaging.destination": "thumbnails",
    "messaging.message.id": "m-1",
    "net.peer.name": "127.0.0.1",
    "net.peer.port": 5672,
}
CURRENT = {
    "messaging.system": "gcp_pubsub",
    "messaging.operation.type": "process",
    "messaging.operation.name": "process",
    "messaging.destination.name": "thumbnails-sub",
    "messaging.message.id": "m-2",
}


def _consumer(attributes: dict[str, Any], name: str = "thumbnails receive") -> SpanFacts:
    return SpanFacts(1, 1, 0, name, 10, 90, attributes, kind=KIND_CONSUMER)


def _identity(span: SpanFacts) -> tuple[object, ...]:
    return tuple(span.attributes.get(f"job.{name}") for name in ("domain", "id", "attempt"))


def test_it_claims_pikas_receive_span_at_its_start_before_any_attribute() -> None:
    assert DIALECT.may_start_job("thumbnails receive", KIND_CONSUMER, {})
    assert not DIALECT.may_start_job("thumbnails send", KIND_PRODUCER, {})
    assert not DIALECT.may_start_job("RENDER", KIND_INTERNAL, {})
    assert not DIALECT.may_start_job("poll", KIND_CONSUMER, {"messaging.operation.type": "receive"})


def test_a_pika_delivery_is_attempt_one_and_its_steps_stay_as_they_are() -> None:
    step = SpanFacts(1, 2, 1, "RENDER", 20, 30, {"job.step.key": "RENDER"}, kind=KIND_INTERNAL)
    job, same = DIALECT.recognise([_consumer(PIKA), step])
    assert _identity(job) == ("thumbnails", "m-1", 1)
    assert same is step


@pytest.mark.parametrize(
    ("extra", "attempt"),
    [
        pytest.param({}, 1, id="no-count"),
        pytest.param({"messaging.gcp_pubsub.message.delivery_attempt": 3}, 3, id="pubsub"),
        pytest.param({"messaging.servicebus.message.delivery_count": 2}, 2, id="servicebus"),
        pytest.param({"messaging.servicebus.message.delivery_count": 0}, 1, id="zero-is-first"),
        pytest.param({"messaging.gcp_pubsub.message.delivery_attempt": "x"}, 0, id="bad"),
    ],
)
def test_current_conventions_and_their_delivery_counts(extra: dict[str, Any], attempt: int) -> None:
    (job,) = DIALECT.recognise([_consumer({**CURRENT, **extra}, "process thumbnails-sub")])
    assert _identity(job) == ("thumbnails-sub", "m-2", attempt)


def test_a_destination_template_is_the_domain() -> None:
    names = {**CURRENT, "messaging.destination.template": "/orders/{id}"}
    (job,) = DIALECT.recognise([_consumer(names, "process /orders/{id}")])
    assert job.attributes["job.domain"] == "/orders/{id}"


@pytest.mark.parametrize(
    "names",
    [
        pytest.param({k: v for k, v in PIKA.items() if k != "messaging.message.id"}, id="no-id"),
        pytest.param({**CURRENT, "messaging.operation.type": "receive"}, id="current-receive"),
        pytest.param({**PIKA, "messaging.operation": "publish"}, id="publish"),
    ],
)
def test_what_is_not_a_processed_message_stays_outside(names: dict[str, Any]) -> None:
    unit = [_consumer(names)]
    assert DIALECT.recognise(unit) == unit


def test_the_codes_job_attributes_win() -> None:
    (job,) = DIALECT.recognise([_consumer({**PIKA, "job.domain": "render", "job.type": "thumb"})])
    assert _identity(job) == ("render", "m-1", 1)
    assert job.attributes["job.type"] == "thumb"


def test_a_celery_run_goes_to_celery_before_messaging() -> None:
    run = _consumer({"celery.action": "run", "messaging.message.id": "t"}, "run/app.thumbnail")
    found = select_dialects("celery,messaging").may_start_job(run.name, run.kind, {})
    assert found is not None
    assert found.name == "celery"


def test_the_rows_of_a_pika_delivery_with_a_failing_step() -> None:
    unit = [
        span(1, 0, "thumbnails receive", 0, 100, PIKA, kind=KIND_CONSUMER, error=True),
        span(2, 1, "upload", 10, 90, {"job.step.key": "UPLOAD"}, error=True),
    ]
    events, logs = rows(recognised(unit, "messaging"))
    assert [(row.job_id, row.step_key, row.step_status) for row in events] == [
        ("m-1", "UPLOAD", "FAILED")
    ]
    assert [(log.domain, log.attempt, log.status) for log in logs] == [("thumbnails", 1, "FAILED")]
