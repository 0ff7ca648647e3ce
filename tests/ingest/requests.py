"""Building OTLP requests from recorded spans, the way exporters and marker senders do."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from typing import Any

import httpx
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk.trace import ReadableSpan

PROTOBUF = {"content-type": "application/x-protobuf"}


def proto_spans(spans: Sequence[ReadableSpan]) -> list[Span]:
    """The SDK's spans as OTLP protobuf spans, through the real exporter's encoder."""
    request = encode_spans(spans)
    return [
        span
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]


def proto_logs(records: Sequence[ReadableLogRecord]) -> list[LogRecord]:
    """The SDK's log records as OTLP protobuf records, through the real exporter's encoder."""
    request = encode_logs(records)
    return [
        record
        for resource in request.resource_logs
        for scope in resource.scope_logs
        for record in scope.log_records
    ]


def logs_request_of(records: Iterable[LogRecord]) -> ExportLogsServiceRequest:
    return ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=list(records))])]
    )


def start_markers(spans: Iterable[Span]) -> list[Span]:
    """A start marker of every span, in turns of the three accepted forms."""
    markers = []
    for number, span in enumerate(spans):
        marker = Span()
        marker.CopyFrom(span)
        marker.ClearField("events")
        marker.ClearField("status")
        form = number % 3
        if form == 0:
            marker.end_time_unix_nano = 0
        elif form == 1:
            marker.end_time_unix_nano = marker.start_time_unix_nano
            marker.attributes.append(KeyValue(key="$span.partial", value=AnyValue(bool_value=True)))
        else:  # Logfire: a child of the real span, carrying the real parent's id
            marker.end_time_unix_nano = marker.start_time_unix_nano
            marker.span_id = (int.from_bytes(span.span_id, "big") ^ 0x5A5A).to_bytes(8, "big")
            marker.parent_span_id = span.span_id
            marker.attributes.extend(
                [
                    KeyValue(key="logfire.span_type", value=AnyValue(string_value="pending_span")),
                    KeyValue(
                        key="logfire.pending_parent_id",
                        value=AnyValue(string_value=(span.parent_span_id or bytes(8)).hex()),
                    ),
                ]
            )
        markers.append(marker)
    return markers


def request_of(spans: Iterable[Span]) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=list(spans))])]
    )


def as_otlp_json(request: ExportTraceServiceRequest | ExportLogsServiceRequest) -> bytes:
    """The OTLP JSON mapping: protobuf's JSON with ids in hex instead of base64."""
    document = json_format.MessageToDict(request)

    def hex_ids(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
                    node[key] = base64.b64decode(value).hex()
                else:
                    hex_ids(value)
        elif isinstance(node, list):
            for item in node:
                hex_ids(item)

    hex_ids(document)
    return json.dumps(document).encode()


def post(url: str, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(
        url, content=body, headers=PROTOBUF if headers is None else headers, timeout=30
    )


def partial_success(reply: httpx.Response) -> tuple[int, str]:
    """(rejected spans, error message) of a 200 answer in protobuf."""
    response = ExportTraceServiceResponse()
    response.ParseFromString(reply.content)
    return response.partial_success.rejected_spans, response.partial_success.error_message


def rejected_log_records(reply: httpx.Response) -> tuple[int, str]:
    """(rejected log records, error message) of a 200 answer to /v1/logs in protobuf."""
    response = ExportLogsServiceResponse()
    response.ParseFromString(reply.content)
    return response.partial_success.rejected_log_records, response.partial_success.error_message
