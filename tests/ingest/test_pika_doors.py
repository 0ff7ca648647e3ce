"""The messaging dialect on the real ``opentelemetry-instrumentation-pika`` against RabbitMQ:
each message a consumer callback processes is an attempt, with the callback's steps, and both
doors write the same rows.

The instrumentation's only release pins ``opentelemetry-instrumentation==0.66b1``; CI installs
it without its dependencies (``.ci/run``), as it runs on ours."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import unquote, urlsplit

import pytest
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode, Tracer

from otel_jobsteps import step
from otel_jobsteps._ingest.decode import decode_protobuf
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging
from tests.ingest.collector import table_rows
from tests.ingest.requests import request_of
from tests.ingest.stories import Recording
from tests.queues.support import AMQP_URL, broker

# Not in an extra (see above); CI checks both import before any test runs.
pika = pytest.importorskip("pika")
PikaInstrumentor = pytest.importorskip("opentelemetry.instrumentation.pika").PikaInstrumentor


@pytest.fixture
def rabbitmq() -> str:
    hello, expect = b"AMQP\x00\x00\x09\x01", b"\x01"  # a broker answers with Connection.Start
    return broker(AMQP_URL, "RabbitMQ", default_port=5672, hello=hello, expect=expect)


@pytest.fixture
def recorded(dsn: str) -> Iterator[Recording]:
    """The live door with only the messaging dialect, pika instrumented to report to it."""
    recording = Recording(dsn, dialects="messaging")
    instrumentor = PikaInstrumentor()
    instrumentor.instrument(tracer_provider=recording.provider)
    yield recording
    instrumentor.uninstrument()
    recording.close()


def _parameters(url: str) -> object:
    """pika's parameters for the tests' AMQP URL, read as kombu reads it (``//``: vhost ``/``)."""
    parts = urlsplit(url)
    return pika.ConnectionParameters(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 5672,
        virtual_host=unquote(parts.path[1:]) or "/",
        credentials=pika.PlainCredentials(parts.username or "guest", parts.password or "guest"),
    )


def _consume_two(url: str, tracer: Tracer, suffix: str) -> None:
    """Publish two messages with ids, then process them in a ``basic_consume`` callback: FETCH
    and RENDER steps; the second's RENDER fails and the callback marks its span failed."""
    queue = f"thumbnails{suffix}"
    with pika.BlockingConnection(_parameters(url)) as connection:
        channel = connection.channel()
        channel.queue_declare(queue, auto_delete=True)
        for number in (1, 2):
            properties = pika.BasicProperties(message_id=f"m{number}{suffix}")
            channel.basic_publish("", queue, str(number).encode(), properties)
        processed: list[bytes] = []

        def on_message(ch: object, method: object, properties: object, body: bytes) -> None:
            with step("FETCH", tracer=tracer):
                pass
            try:
                with step("RENDER", tracer=tracer):
                    if body == b"2":
                        raise OSError("disk full")
            except OSError as error:
                trace.get_current_span().set_status(Status(StatusCode.ERROR, str(error)))
            channel.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]
            processed.append(body)
            if len(processed) == 2:
                channel.stop_consuming()

        channel.basic_consume(queue, on_message)
        channel.start_consuming()


def test_each_processed_message_is_an_attempt_with_the_same_rows_through_both_doors(
    rabbitmq: str, recorded: Recording, dsn: str, second_dsn: str
) -> None:
    suffix = f"-{uuid.uuid4().hex[:8]}"
    spans = recorded.spans(lambda tracer, _: _consume_two(rabbitmq, tracer, suffix), suffix)
    consumers = [span for span in spans if span.name == f"thumbnails{suffix} receive"]
    assert len(consumers) == 2  # the instrumentation's own span, as utils.py:73-81 starts it

    staging = Staging(
        CollectSettings(second_dsn, settle_after_s=0.0, connections=1, dialects=("messaging",))
    )
    try:
        decoded = decode_protobuf(request_of(spans).SerializeToString())
        staging.receive(decoded.spans, decoded.wire)
        staging.settle()
    finally:
        staging.close()

    events, logs = live = table_rows(dsn)
    assert [(row[0], row[1], row[3], row[4]) for row in logs] == [
        (f"thumbnails{suffix}", f"m1{suffix}", 1, "COMPLETED"),
        (f"thumbnails{suffix}", f"m2{suffix}", 1, "FAILED"),
    ]
    assert [(row[1], row[5], row[6]) for row in events] == [
        (f"m1{suffix}", "FETCH", "COMPLETED"),
        (f"m1{suffix}", "RENDER", "COMPLETED"),
        (f"m2{suffix}", "FETCH", "COMPLETED"),
        (f"m2{suffix}", "RENDER", "FAILED"),
    ]
    assert table_rows(second_dsn) == live
