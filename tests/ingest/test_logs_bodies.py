"""``POST /v1/logs`` bodies: OTLP JSON and gzip give the rows protobuf gives; a body that does
not decode is a clear 400; a record with ids of the wrong length is rejected alone; the
counters and the gRPC LogsService's INVALID_ARGUMENT say the same."""

from __future__ import annotations

import gzip

import grpc
import httpx
import pytest
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from tests.ingest.collector import CollectorFactory, table_rows
from tests.ingest.requests import (
    PROTOBUF,
    as_otlp_json,
    logs_request_of,
    post,
    proto_logs,
    proto_spans,
    rejected_log_records,
    request_of,
)
from tests.ingest.test_logs_exporter import _recorded

JSON = {"content-type": "application/json"}
GZIP = {**PROTOBUF, "content-encoding": "gzip"}
LOGS_EXPORT = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"


@pytest.mark.parametrize("form", ["json", "gzip", "json-gzip"])
def test_json_and_gzip_bodies_give_the_processors_rows(
    start_collect: CollectorFactory, dsn: str, second_dsn: str, form: str
) -> None:
    collector = start_collect(second_dsn)
    spans, records, job_id = _recorded(dsn)
    assert post(collector.traces_url, request_of(proto_spans(spans)).SerializeToString()).is_success
    request = logs_request_of(proto_logs(records))
    body = as_otlp_json(request) if form.startswith("json") else request.SerializeToString()
    headers = dict(JSON if form.startswith("json") else PROTOBUF)
    if form.endswith("gzip"):
        body, headers["content-encoding"] = gzip.compress(body), "gzip"
    reply = post(f"{collector.url}/v1/logs", body, headers)
    assert reply.status_code == 200, reply.content
    assert table_rows(second_dsn, job_id) == table_rows(dsn, job_id)


def test_bad_log_bodies_are_400_and_bad_records_are_rejected_alone(
    start_collect: CollectorFactory, dsn: str, second_dsn: str
) -> None:
    collector = start_collect(second_dsn)
    url = f"{collector.url}/v1/logs"
    for body, headers in [
        (b"\xff\xff\xff\xff", PROTOBUF),
        (b"{not json", JSON),
        (b"[1, 2]", JSON),
        (b'{"resourceLogs": "x"}', JSON),
        (b"not gzip", GZIP),
        (gzip.compress(logs_request_of([]).SerializeToString())[:-4], GZIP),  # truncated
    ]:
        reply = post(url, body, headers)
        assert reply.status_code == 400, (body[:20], reply.content)
        status = Status()
        if reply.headers["content-type"] == JSON["content-type"]:  # answered in its encoding
            json_format.Parse(reply.content, status)
        else:
            status.ParseFromString(reply.content)
        assert status.code == 3  # INVALID_ARGUMENT
        assert status.message  # saying why

    spans, records, job_id = _recorded(dsn)
    assert post(collector.traces_url, request_of(proto_spans(spans)).SerializeToString()).is_success
    wire = proto_logs(records)
    bad = LogRecord()
    bad.CopyFrom(wire[0])
    bad.trace_id = b"\x01" * 3
    no_context = LogRecord(body=wire[0].body, severity_number=wire[0].severity_number)
    reply = post(url, logs_request_of([bad, no_context, *wire]).SerializeToString())
    assert reply.status_code == 200
    rejected, message = rejected_log_records(reply)
    assert rejected == 1
    assert "16 bytes" in message
    assert table_rows(second_dsn, job_id) == table_rows(dsn, job_id)

    metrics = httpx.get(f"{collector.url}/metrics").text
    assert 'otel_jobsteps_collect_log_records_total{outcome="rejected"} 1.0' in metrics
    assert 'otel_jobsteps_collect_log_records_total{outcome="outside"} 1.0' in metrics
    assert f'otel_jobsteps_collect_log_records_total{{outcome="staged"}} {len(wire)}.0' in metrics

    with grpc.insecure_channel(collector.grpc_target) as channel:
        export = channel.unary_unary(LOGS_EXPORT)
        with pytest.raises(grpc.RpcError) as refused:
            export(b"\xff\xff\xff\xff", timeout=10)
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert collector.process.poll() is None
