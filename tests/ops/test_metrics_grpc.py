"""collect counts its gRPC calls as its HTTP requests: in the request metrics (the status OTLP/HTTP
answers for the same outcome, with ``rpc_system="grpc"``) and in the access log."""

from __future__ import annotations

import json

import grpc
import httpx
import pytest

from tests.ingest.collector import CollectorFactory
from tests.ingest.requests import request_of
from tests.ingest.stories import Recording, seed_story
from tests.ops.test_prometheus import check_metrics, samples, value

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def test_grpc_calls_are_counted_and_logged_as_http_requests_are(
    start_collect: CollectorFactory, recording: Recording, second_dsn: str
) -> None:
    spans = recording.spans(seed_story, "-grpc")
    collector = start_collect(second_dsn, "--access-log")
    with grpc.insecure_channel(collector.grpc_target) as channel:
        export = channel.unary_unary(EXPORT)  # raw bytes in and out
        export(request_of(spans).SerializeToString(), timeout=30)
        with pytest.raises(grpc.RpcError) as raised:
            export(b"\x0a\x05ab", timeout=30)  # does not decode
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT

    reply = httpx.get(collector.url + "/metrics", timeout=30)
    found = samples(reply.text)
    requests = "otel_jobsteps_collect_requests_total"
    grpc_call = {"rpc_system": "grpc"}
    ok = value(found, requests, outcome="ok", http_response_status_code="200", **grpc_call)
    bad = value(
        found, requests, outcome="bad_request", http_response_status_code="400", **grpc_call
    )
    assert (ok, bad) == (1, 1)
    duration = "otel_jobsteps_collect_request_duration_seconds_count"
    assert value(found, duration, outcome="ok", http_response_status_code="200", **grpc_call) == 1
    check_metrics(reply.text)

    collector.stop()
    lines = [json.loads(line) for line in collector.log().splitlines() if line.startswith("{")]
    calls = [{k: v for k, v in line.items() if k != "duration_ms"} for line in lines
             if line.get("protocol") == "grpc"]  # fmt: skip
    answer = {"service": "collect", "protocol": "grpc", "method": "POST", "path": EXPORT}
    assert calls == [
        {**answer, "status": 200, "grpc_status": "OK", "spans_staged": len(spans)},
        {**answer, "status": 400, "grpc_status": "INVALID_ARGUMENT", "spans_staged": 0},
    ]
    assert f"answered since start, {len(spans)} spans staged)" in collector.log()
