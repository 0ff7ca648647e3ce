"""The messaging conventions: the CONSUMER span in which a message is processed is an attempt of
the job the message is, any broker, any language (OpenTelemetry semantic conventions, messaging
spans; attribute names as ``opentelemetry-semantic-conventions`` 0.66b2 spells them).

Which spans: CONSUMER with ``messaging.operation.type = "process"`` (current conventions;
``deliver`` in 1.24-1.26), or the older ``messaging.operation`` ``process`` / ``receive`` /
``deliver``. The older ``receive`` is how push consumers on older conventions mark the span
their callback runs in: ``opentelemetry-instrumentation-pika`` 0.66b1
(``opentelemetry/instrumentation/pika/utils.py:53-94``, ``_get_span`` ``:137-155``,
``_enrich_span`` ``:164-191``) starts ``<exchange or routing key> receive`` as CONSUMER with no
attributes, then sets ``messaging.system = rabbitmq``, ``messaging.operation = receive``,
``messaging.destination`` and ``messaging.message.id`` (only when the publisher set a message
id), and runs the user's callback inside it. A current-conventions ``receive`` (a pull, with the
processing outside it) is not a job. The span's attributes are read at its end; at its start
any CONSUMER span that names no other operation may be one.

What the model gets: id = ``messaging.message.id`` (no id, no job: Kafka names none); domain =
``messaging.destination.template``, else ``messaging.destination.name``, else the older
``messaging.destination`` (the queue, topic or exchange); type: none (a consume hook, such as
pika's ``consume_hook``, can set ``job.type`` on the span); attempt =
``messaging.gcp_pubsub.message.delivery_attempt`` or ``messaging.servicebus.message.delivery_count``
(both count this delivery; 0 is read as 1), else 1: a broker that redelivers without saying so
(RabbitMQ) reruns attempt 1, and the new run, another execution of that attempt, closes the
lost one FAILED ``abandoned``. Steps are the spans with ``job.step.key`` inside.

Limit: pika's ``BlockingChannel.consume()`` generator ends its span when the message is handed
out (``utils.py:209-258``), before the user's code runs: such a job has no steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...attributes import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID
from ..facts import SpanFacts
from .base import KIND_CONSUMER, Dialect, number, with_defaults

__all__ = ["DIALECT"]

OPERATION_TYPE = "messaging.operation.type"
OLD_OPERATION = "messaging.operation"
PROCESSING = frozenset({"process", "deliver"})
OLD_PROCESSING = frozenset({"process", "deliver", "receive"})
MESSAGE_ID = "messaging.message.id"
DOMAINS = ("messaging.destination.template", "messaging.destination.name", "messaging.destination")
ATTEMPTS = (
    "messaging.gcp_pubsub.message.delivery_attempt",
    "messaging.servicebus.message.delivery_count",
)


def _may_start_job(name: str, kind: int, attributes: Mapping[str, Any]) -> bool:
    if kind != KIND_CONSUMER:
        return False
    operation = attributes.get(OPERATION_TYPE)
    if operation is not None:
        return operation in PROCESSING
    operation = attributes.get(OLD_OPERATION)
    return operation is None or operation in OLD_PROCESSING


def _recognise(unit: Sequence[SpanFacts]) -> list[SpanFacts]:
    span = unit[0]
    names = span.attributes
    message_id = names.get(MESSAGE_ID)
    if message_id in (None, "") or not _processes(names):
        return list(unit)
    domain = next((value for key in DOMAINS if (value := names.get(key)) not in (None, "")), None)
    attempt = 1
    for key in ATTEMPTS:
        if key in names:
            count = number(names[key])
            attempt = 0 if count is None else max(count, 1)  # 0: the translation rejects it
            break
    job = {JOB_DOMAIN: domain, JOB_ID: message_id, JOB_ATTEMPT: attempt}
    return [with_defaults(span, job), *unit[1:]]


def _processes(names: Mapping[str, Any]) -> bool:
    operation = names.get(OPERATION_TYPE)
    if operation is not None:
        return operation in PROCESSING
    return names.get(OLD_OPERATION) in OLD_PROCESSING


DIALECT = Dialect(
    name="messaging",
    source="OpenTelemetry messaging conventions (opentelemetry-semantic-conventions 0.66b2); "
    "opentelemetry-instrumentation-pika 0.66b1: opentelemetry/instrumentation/pika/utils.py",
    may_start_job=_may_start_job,
    recognise=_recognise,
    kinds=frozenset({KIND_CONSUMER}),
)
