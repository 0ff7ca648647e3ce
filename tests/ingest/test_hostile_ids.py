"""Hostile ids, keys and texts through both doors: the processor's rows, or the job refused
alone and counted (the processor ignores it, collect answers it in ``partial_success``); never
a 5xx for the rest of the request."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import grpc
import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from opentelemetry._logs import SeverityNumber
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.trace import Tracer

from tests.helpers import free_port
from tests.ingest.collector import table_rows
from tests.ingest.receiver import Receiver, one_job, receiving
from tests.ingest.requests import (
    PROTOBUF,
    logs_request_of,
    partial_success,
    rejected_log_records,
    request_of,
    start_markers,
)
from tests.ingest.stories import Recording

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@pytest.fixture
def receiver(second_dsn: str) -> Iterator[Receiver]:
    with receiving(second_dsn) as found:
        yield found


def test_nul_in_ids_keys_types_and_messages_gives_the_processors_rows(
    recording: Recording, receiver: Receiver, dsn: str, second_dsn: str
) -> None:
    story = partial(
        one_job, domain="d\x00", job_id="j\x00-nul", key="k\x00ey", kind="t\x00", message="m\x00"
    )
    spans = recording.spans(lambda tracer, _: story(tracer), "-nul")
    reply = receiver.post(spans)

    assert reply.status_code == 200
    assert partial_success(reply) == (0, "")
    events, logs = table_rows(second_dsn, "%-nul")
    assert (events, logs) == table_rows(dsn, "%-nul")
    assert [(row[0], row[1], row[4], row[5], row[8]) for row in events] == [
        ("d\ufffd", "j\ufffd-nul", "STEP", "k\ufffdey", None),
        ("d\ufffd", "j\ufffd-nul", "t\ufffd", None, "m\ufffd"),
    ]
    assert len(logs) == 1


def test_ids_over_the_byte_limit_refuse_their_job_alone_through_both_doors(
    recording: Recording, dsn: str, second_dsn: str
) -> None:
    """512 characters each, 1,536 bytes each: within the character limit, over PostgreSQL's
    btree limit together (2,704 bytes) on every (domain, job_id) index."""
    bad = partial(one_job, domain="域" * 512, job_id="号" * 508 + "-cjk")
    innocent = partial(one_job, domain="d", job_id="innocent-cjk")

    def story(tracer: Tracer, _: str) -> None:
        bad(tracer)
        innocent(tracer)

    spans = recording.spans(story, "")
    grpc_port = free_port()
    with receiving(second_dsn, grpc_listen=f"127.0.0.1:{grpc_port}") as receiver:
        http = receiver.post(spans)
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            export: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(EXPORT)
            answer = ExportTraceServiceResponse.FromString(
                export(request_of(spans).SerializeToString(), timeout=30)
            )
        refused = receiver.count("rejected_spans")

    assert http.status_code == 200
    rejected, message = partial_success(http)
    assert rejected == 3  # the job span, its step and its event
    assert "1024 bytes" in message
    assert answer.partial_success.rejected_spans == 3
    assert "1024 bytes" in answer.partial_success.error_message
    assert refused == 6  # both answers counted
    assert recording.processor.stats().get("invalid_job_span") == 1  # live: ignored, counted
    for door in (dsn, second_dsn):
        assert table_rows(door, "%-cjk") == table_rows(dsn, "innocent-cjk")
        assert len(table_rows(door, "innocent-cjk")[0]) == 2


def test_a_job_at_every_limit_at_once_is_written(
    recording: Recording, receiver: Receiver, dsn: str, second_dsn: str
) -> None:
    """The widest index entries these limits allow fit: ids of 1,024 bytes, a type cut to 512
    bytes and a step key of 256 four-byte characters, none of them compressible, in a step
    left open (job_event_open_gauges holds domain, type and key together)."""
    wide = "".join(chr(0x10000 + n * 7919 % 0xFFFF) for n in range(1, 300))  # 4 bytes each
    domain, job_id, kind = wide[:256], wide[40:292] + "-max", wide[9:299]
    key = wide[20:276] + "cut"
    open_steps = []

    def story(tracer: Tracer, _: str) -> None:
        job: dict[str, str | int] = {
            "job.domain": domain,
            "job.id": job_id,
            "job.attempt": 1,
            "job.type": kind,
        }
        with tracer.start_as_current_span("job", attributes=job):
            with tracer.start_as_current_span("step", attributes={"job.step.key": key}):
                assert recording.processor.force_flush(10_000)
                open_steps.append(_open_steps(dsn))

    spans = recording.spans(story, "")
    markers = start_markers(spans)
    first = receiver.post(markers)  # the starts alone: an open step
    open_steps.append(_open_steps(second_dsn))
    second = receiver.post(spans)

    assert (first.status_code, second.status_code) == (200, 200)
    assert partial_success(first) == partial_success(second) == (0, "")
    assert open_steps[0] == open_steps[1] == [(domain, kind[:128], key[:256])]
    assert len(kind[:128].encode()) == 512  # the type, cut at 512 bytes on a character
    assert table_rows(second_dsn, "%-max") == table_rows(dsn, "%-max")


def _open_steps(dsn: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT domain, job_type, step_key FROM job_event"
            " WHERE type = 'STEP' AND ended_at IS NULL"
        ).fetchall()


# Text as job code may write it: NUL and other controls, a bidi override, the replacement
# character, two-, three- and four-byte characters, and long runs of them. (Lone surrogates
# reach only the processor: an OTLP exporter cannot encode them, and collect's decoding
# refuses a body holding one with 400; tests/integration/test_hostile_input.py covers them.)
_CHARS = st.sampled_from(["\x00", "\x01", "\x1b", "\x7f", "\u202e", "\ufffd", "é", "号", "😀", "a"])
_HOSTILE = st.one_of(
    st.text(_CHARS, max_size=40),
    st.builds(lambda char, n: char * n, _CHARS, st.integers(200, 1100)),
)


@settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(domain=_HOSTILE, job_id=_HOSTILE, key=_HOSTILE, kind=_HOSTILE, text=_HOSTILE)
@example(domain="d\x00", job_id="\x00", key="\x00", kind="\x00", text="\x00")
@example(domain="域" * 512, job_id="号" * 400, key="😀" * 300, kind="é" * 600, text="x")
@example(domain="😀" * 256, job_id="😀" * 250, key="😀" * 300, kind="😀" * 200, text="\x1b")
def test_hostile_values_give_rows_or_counted_refusals_never_a_5xx(
    recording: Recording,
    receiver: Receiver,
    dsn: str,
    second_dsn: str,
    domain: str,
    job_id: str,
    key: str,
    kind: str,
    text: str,
) -> None:
    suffix = f"-p{uuid.uuid4().hex[:8]}"
    invalid_before = recording.processor.stats().get("invalid_job_span", 0)

    def story(tracer: Tracer, _: str) -> None:
        one_job(tracer, domain="d", job_id="innocent" + suffix)
        job: dict[str, str | int] = {
            "job.domain": domain,
            "job.id": job_id + suffix,
            "job.attempt": 1,
            "job.type": kind,
        }
        with tracer.start_as_current_span("job", attributes=job):
            with tracer.start_as_current_span("step", attributes={"job.step.key": key}):
                recording.logger.emit(
                    severity_number=SeverityNumber.WARN, body=text, attributes={f"a.{key}": text}
                )
            event = {"job.event.type": text, "job.event.message": text}
            with tracer.start_as_current_span("event", attributes=event):
                pass

    spans = recording.spans(story, "")
    traces = receiver.post(spans)
    logs: Any = receiver.client.post(
        "/v1/logs", content=logs_request_of(recording.logs()).SerializeToString(), headers=PROTOBUF
    )

    assert (traces.status_code, logs.status_code) == (200, 200)
    assert rejected_log_records(logs)[0] == 0
    live = table_rows(dsn, f"%{suffix}")
    assert table_rows(second_dsn, f"%{suffix}") == live
    assert table_rows(dsn, f"innocent{suffix}")[1]  # the innocent job is written
    hostile = [row for row in live[1] if row[1] != f"innocent{suffix}"]
    refused = partial_success(traces)[0]
    if hostile:
        assert refused == 0
    else:  # ignored and counted by the processor; ids too long refused by collect at once
        assert recording.processor.stats().get("invalid_job_span", 0) > invalid_before
        assert refused in (0, 3)  # an empty id: collect's spans wait, dropped later, counted
