"""OTLP log request bodies (``ExportLogsServiceRequest``, protobuf or JSON) -> log facts.

A record with no span context (trace or span id empty or all zero) lies outside any job scope:
it is counted and dropped here, costing no database work. A record whose ids have the wrong
length is rejected (``partial_success``). Each kept record comes with its bytes as received
(staged, so it is never decoded from anything else) and a key that makes a copy delivered
again conflict with itself: a digest of those bytes and of how many identical records came
before it in the same request (two identical lines logged in one clock tick stay two).
"""

from __future__ import annotations

import hashlib
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from .._core.facts import LogFacts
from .._telemetry.log import is_own_logger
from .decode import Decoded, attribute_values, decoder

__all__ = ["decode_log_record", "decode_logs_json", "decode_logs_protobuf", "log_key"]


def log_key(wire: bytes, occurrence: int) -> bytes:
    """The staging key of a record as received: the same bytes at the same place in a
    request give the same key, whichever request delivers them."""
    return hashlib.blake2b(wire + occurrence.to_bytes(4, "big"), digest_size=16).digest()


def _records(request: ExportLogsServiceRequest) -> Decoded:
    decoded = Decoded(signal="logs")
    seen: dict[bytes, int] = {}
    for resource_logs in request.resource_logs:
        for scope_logs in resource_logs.scope_logs:
            if is_own_logger(scope_logs.scope.name):
                # otel_jobsteps' own records (a worker's setup warning): no job's lines.
                decoded.outside += len(scope_logs.log_records)
                continue
            for record in scope_logs.log_records:
                facts = _record_facts(record, decoded)
                if facts is None:
                    continue
                wire = record.SerializeToString()
                occurrence = seen.get(wire, 0)
                seen[wire] = occurrence + 1
                decoded.logs.append(facts)
                decoded.wire.append(wire)
                decoded.keys.append(log_key(wire, occurrence))
    return decoded


# A binary ``ExportLogsServiceRequest``; its OTLP JSON mapping (ids in hex).
decode_logs_protobuf = decoder(ExportLogsServiceRequest, _records, json_mapping=False)
decode_logs_json = decoder(ExportLogsServiceRequest, _records, json_mapping=True)


def decode_log_record(body: bytes) -> LogFacts:
    """One record kept as received -> its facts, exactly as when it arrived."""
    record = LogRecord()
    record.ParseFromString(body)
    facts = _record_facts(record, Decoded(signal="logs"))
    if facts is None:
        raise ValueError("a staged log record no longer decodes")
    return facts


def _record_facts(record: LogRecord, decoded: Decoded) -> LogFacts | None:
    trace_id, span_id = record.trace_id, record.span_id
    if len(trace_id) not in (0, 16) or len(span_id) not in (0, 8):
        decoded.reject("trace ids must be 16 bytes, span ids 8 bytes")
        return None
    trace_number = int.from_bytes(trace_id, "big")
    span_number = int.from_bytes(span_id, "big")
    if not trace_number or not span_number:
        decoded.outside += 1  # no span context: outside any job scope
        return None
    return LogFacts(
        trace_id=trace_number,
        span_id=span_number,
        time_ns=record.time_unix_nano or record.observed_time_unix_nano,
        event_name=record.event_name or None,
        severity_number=int(record.severity_number),
        severity_text=record.severity_text or None,
        body=body_value(record.body) if record.HasField("body") else None,
        attributes=attribute_values(record.attributes),
    )


def body_value(value: AnyValue) -> Any:
    """A record's body as the SDK holds it: text, numbers, bytes, lists and dicts."""
    kind = value.WhichOneof("value")
    if kind in ("string_value", "int_value", "double_value", "bool_value"):
        return getattr(value, kind)
    if kind == "bytes_value":
        return value.bytes_value
    if kind == "array_value":
        return [body_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {pair.key: body_value(pair.value) for pair in value.kvlist_value.values}
    return None
