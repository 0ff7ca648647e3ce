"""OTLP/HTTP trace request bodies (protobuf or the OTLP JSON mapping) -> span facts.

Decoding uses ``opentelemetry-proto``. Spans with ids of the wrong length are rejected one by
one (the request's ``partial_success``); a body that is not a trace request at all is an error.
Start markers become facts with ``end_ns == 0``: a span with ``$span.partial = true``
(Trigger.dev), an end time of 0, or a Logfire pending span (``logfire.span_type =
"pending_span"``: a child of the real span that carries its start, its attributes, and its
parent's id in ``logfire.pending_parent_id``).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from .._core.dialects import Dialects
from .._core.events import events_read
from .._core.facts import LogFacts, SpanEvent, SpanFacts, resource_values
from .._core.limits import MAX_ID_BYTES, id_fits
from .._core.vocabulary import MAX_ID_CHARS
from ..attributes import JOB_DOMAIN, JOB_EVENT_TYPE, JOB_ID
from .mapping import claimed

__all__ = [
    "LOGFIRE_PENDING_PARENT",
    "LOGFIRE_SPAN_TYPE",
    "PARTIAL",
    "BadRequest",
    "Decoded",
    "attribute_values",
    "decode_json",
    "decode_protobuf",
    "decode_span",
    "decoder",
    "parse_json",
    "parse_protobuf",
]

PARTIAL = "$span.partial"
# A span's whole resource, kept with its staged copy when a dialect may read it.
CARRIED_RESOURCE = "otel_jobsteps.carried_resource"
_NO_RESOURCE: Mapping[str, Any] = {}
LOGFIRE_SPAN_TYPE = "logfire.span_type"
LOGFIRE_PENDING_PARENT = "logfire.pending_parent_id"
_MARKER_ATTRIBUTES = (PARTIAL, LOGFIRE_SPAN_TYPE, LOGFIRE_PENDING_PARENT)
_ID_FIELDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")
_ERROR = Status.STATUS_CODE_ERROR
_IDS_TOO_LONG = (
    f"a job span's {JOB_DOMAIN} or {JOB_ID} over {MAX_ID_CHARS} characters or {MAX_ID_BYTES}"
    " bytes of UTF-8: the job's spans are refused"
)
M = TypeVar("M", bound=Message)


class BadRequest(ValueError):
    """The body is not an OTLP trace request (answered 400: the client must not retry it)."""


@dataclass(slots=True)
class Decoded:
    """The usable spans (or log records) of one request, and how many were rejected and why
    (the first reason)."""

    spans: list[SpanFacts] = field(default_factory=list)
    wire: list[bytes] = field(default_factory=list)  # each span (record) as received
    rejected: int = 0
    reason: str = ""
    signal: str = "spans"  # or "logs": `logs` and `keys` hold the request's records
    logs: list[LogFacts] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)  # each record's staging key (`logs`)
    outside: int = 0  # records without a span context: outside any job scope
    # each span's kept resource attributes (`resource_values`), until `carry_resources`
    resources: list[dict[str, str]] = field(default_factory=list)

    def reject(self, reason: str) -> None:
        self.rejected += 1
        if not self.reason:
            self.reason = reason


def parse_json(body: bytes, request: Message) -> None:
    """Fill ``request`` (an OTLP export request) from its OTLP JSON mapping; `BadRequest`."""
    name = type(request).__name__
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise BadRequest(f"not JSON: {error}") from None
    if not isinstance(document, dict):
        raise BadRequest(f"not an {name}: the JSON body must be an object")
    _hex_ids_to_base64(document)
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as error:
        raise BadRequest(f"not an {name}: {error}") from None


def parse_protobuf(body: bytes, request: Message) -> None:
    """Fill ``request`` (an OTLP export request) from its binary protobuf; `BadRequest`."""
    try:
        request.ParseFromString(body)
    except (DecodeError, ValueError, RuntimeError) as error:
        raise BadRequest(f"not a protobuf {type(request).__name__}: {error}") from None


def decoder(
    message: Callable[[], M], facts: Callable[[M], Decoded], *, json_mapping: bool
) -> Callable[[bytes], Decoded]:
    """A body decoder: an export request (``message``) parsed from binary protobuf or from the
    OTLP JSON mapping, then its usable items (``facts``)."""
    parse = parse_json if json_mapping else parse_protobuf

    def decode(body: bytes) -> Decoded:
        request = message()
        parse(body, request)
        return facts(request)

    return decode


def _hex_ids_to_base64(node: Any) -> None:
    """OTLP JSON writes ids in hex where protobuf's JSON mapping expects base64 (in place)."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if key in _ID_FIELDS and isinstance(value, str):
                    try:
                        raw = bytes.fromhex(value)
                    except ValueError:
                        raw = b"\x00"  # not hex: a wrong-length id, so this span is rejected
                    item[key] = base64.b64encode(raw).decode("ascii")
                elif isinstance(value, (dict, list)):
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, (dict, list)))


def _facts(request: ExportTraceServiceRequest) -> Decoded:
    decoded = Decoded()
    spans, wire = decoded.spans, decoded.wire
    refused: set[tuple[int, int]] = set()
    resources = decoded.resources
    for resource_spans in request.resource_spans:
        whole = attribute_values(resource_spans.resource.attributes)
        resource = resource_values(whole)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                facts = _span_facts(span, decoded, whole)
                if facts is None:
                    continue
                if not _ids_fit(facts.attributes):
                    refused.add((facts.trace_id, facts.span_id))
                    continue
                spans.append(facts)
                wire.append(span.SerializeToString())
                resources.append(resource)
    if refused:
        _refuse_jobs(decoded, refused)
    return decoded


def carry_resources(decoded: Decoded, dialects: Dialects) -> None:
    """Give each job span its resource's kept values under `RESOURCE_ATTRIBUTES`, as the
    processor passes them: in its facts, and in its copy kept for a later derivation (a
    serialized message followed by more of its fields is that message with them added). A span
    a dialect may make a job keeps its whole resource (``CARRIED_RESOURCE``: a dialect may read
    it, as the processor's hands it the SDK's). Other spans stay as received: they would only
    cost room."""
    carried: dict[int, bytes] = {}  # per resource: its attributes as one kept attribute
    kept_values: dict[int, bytes] = {}  # per resource: its kept values as attributes
    for index, resource in enumerate(decoded.resources):
        span = decoded.spans[index]
        if JOB_ID in span.attributes:
            if resource:
                extra = kept_values.get(id(resource))
                if extra is None:
                    extra = kept_values[id(resource)] = _as_attributes(resource)
                decoded.wire[index] += extra
                span.attributes = {**span.attributes, **resource}
        elif span.resource and claimed(span, dialects):
            whole = carried.get(id(span.resource))
            if whole is None:
                pairs = KeyValueList(values=[_pair(k, v) for k, v in span.resource.items()])
                kept = KeyValue(key=CARRIED_RESOURCE, value=AnyValue(kvlist_value=pairs))
                whole = carried[id(span.resource)] = Span(attributes=[kept]).SerializeToString()
            decoded.wire[index] += whole
    decoded.resources = []


def _as_attributes(values: Mapping[str, str]) -> bytes:
    """A span message holding only ``values`` as attributes, serialized."""
    return Span(attributes=[_text_pair(k, v) for k, v in values.items()]).SerializeToString()


def _text_pair(key: str, value: str) -> KeyValue:
    return KeyValue(key=key, value=AnyValue(string_value=value))


def _pair(key: str, value: object) -> KeyValue:
    return KeyValue(key=key, value=any_value(value))


def any_value(value: object) -> AnyValue:
    """A decoded attribute value as OTLP's AnyValue again (`attribute_values`' inverse)."""
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int) and -(2**63) <= value < 2**63:
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, tuple | list):
        return AnyValue(array_value=ArrayValue(values=[any_value(v) for v in value]))
    if isinstance(value, Mapping):
        pairs = [KeyValue(key=str(k), value=any_value(v)) for k, v in value.items()]
        return AnyValue(kvlist_value=KeyValueList(values=pairs))
    return AnyValue(string_value=value if isinstance(value, str) else str(value))


def _ids_fit(attributes: Mapping[str, Any]) -> bool:
    """Whether a job span's ids fit the limits (`_core.limits.id_fits`); an event span naming a
    job is placed by its parent first, as live, so only a job span is refused for them."""
    if JOB_ID not in attributes or JOB_EVENT_TYPE in attributes:
        return True
    return id_fits(attributes[JOB_ID]) and id_fits(attributes.get(JOB_DOMAIN, ""))


def _refuse_jobs(decoded: Decoded, refused: set[tuple[int, int]]) -> None:
    """Refuse the job spans ``refused`` (their ids do not fit) and their descendants in the
    request, as the processor ignores such a job and every span in it; counted as rejected."""
    parents = {(s.trace_id, s.span_id): s.parent_span_id for s in decoded.spans}
    for _ in refused:
        decoded.reject(_IDS_TOO_LONG)
    known = dict.fromkeys(refused, True)  # whether a span lies in a refused job
    for node in parents:
        chain: list[tuple[int, int]] = []
        while node not in known and node in parents and len(chain) <= len(parents):
            chain.append(node)
            node = (node[0], parents[node])
        inside = known.get(node, False)
        known.update(dict.fromkeys(chain, inside))
    kept = [i for i, s in enumerate(decoded.spans) if not known[(s.trace_id, s.span_id)]]
    for _ in range(len(decoded.spans) - len(kept)):
        decoded.reject(_IDS_TOO_LONG)
    decoded.spans = [decoded.spans[i] for i in kept]
    decoded.wire = [decoded.wire[i] for i in kept]
    decoded.resources = [decoded.resources[i] for i in kept]


# A binary ``ExportTraceServiceRequest``; its OTLP JSON mapping (ids in hex, 64-bit integers
# as strings or numbers, enums as ints).
decode_protobuf = decoder(ExportTraceServiceRequest, _facts, json_mapping=False)
decode_json = decoder(ExportTraceServiceRequest, _facts, json_mapping=True)


def decode_span(body: bytes) -> SpanFacts:
    """One span kept as received (`Decoded.wire`) -> its facts, exactly as when it arrived."""
    span = Span()
    span.ParseFromString(body)
    facts = _span_facts(span, Decoded())
    if facts is None:
        raise ValueError("a staged span no longer decodes")
    return facts


def _span_facts(
    span: Span, decoded: Decoded, resource: Mapping[str, Any] | None = None
) -> SpanFacts | None:
    trace_id, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
    if len(trace_id) != 16 or len(span_id) != 8 or len(parent) not in (0, 8):
        decoded.reject("trace ids must be 16 bytes, span ids 8 bytes")
        return None
    trace_number = int.from_bytes(trace_id, "big")
    span_number = int.from_bytes(span_id, "big")
    if not trace_number or not span_number:
        decoded.reject("trace and span ids must not be all zero")
        return None
    start_ns, end_ns = span.start_time_unix_nano, span.end_time_unix_nano
    if not start_ns or (end_ns and end_ns < start_ns):
        decoded.reject("a span needs a start time, and an end time not before it")
        return None
    attributes = attribute_values(span.attributes)
    parent_number = int.from_bytes(parent, "big") if parent else 0
    if attributes.get(LOGFIRE_SPAN_TYPE) == "pending_span":
        # Logfire's marker is a child of the span it stands for.
        real_parent = attributes.get(LOGFIRE_PENDING_PARENT)
        try:
            grandparent = int(real_parent, 16) if isinstance(real_parent, str) else 0
        except ValueError:
            grandparent = 0
        if not parent_number or not 0 <= grandparent < 2**64:
            decoded.reject("a pending span needs its real span as parent")
            return None
        span_number, parent_number, end_ns = parent_number, grandparent, 0
    elif attributes.get(PARTIAL) in (True, "true"):
        end_ns = 0
    if not end_ns:
        attributes = {k: v for k, v in attributes.items() if k not in _MARKER_ATTRIBUTES}
    if CARRIED_RESOURCE in attributes:  # a staged copy of a span a dialect may read
        carried = attributes.pop(CARRIED_RESOURCE)
        resource = carried if isinstance(carried, dict) else None
    status = span.status
    error = status.code == _ERROR
    return SpanFacts(
        trace_number,
        span_number,
        parent_number,
        span.name,
        start_ns,
        end_ns,
        attributes,
        _events(span),
        error,
        status.message or None,
        span.kind,
        resource or _NO_RESOURCE,
    )


def _events(span: Span) -> list[SpanEvent]:
    """The span's events read (`_core.events.events_read`, as the processor keeps them): the
    others are never decoded."""
    events = span.events
    if not events:
        return []  # most spans
    return [
        SpanEvent(event.name, event.time_unix_nano, attribute_values(event.attributes))
        for event in events_read(events)
    ]


def attribute_values(pairs: Any) -> dict[str, Any]:
    """OTLP ``KeyValue`` list -> a plain dict (bytes as hex, maps as dicts, arrays as tuples:
    as the SDK keeps them, so a value turned into text reads the same through both doors)."""
    found = {}
    for pair in pairs:  # the scalar case inline: this runs for every attribute received
        value = pair.value
        kind = value.WhichOneof("value")
        found[pair.key] = getattr(value, kind) if kind in _SCALARS else _value(value)
    return found


_SCALARS = frozenset({"string_value", "int_value", "double_value", "bool_value"})


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind in _SCALARS:
        return getattr(value, kind)
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return attribute_values(value.kvlist_value.values)
    if kind == "bytes_value":
        return binascii.hexlify(value.bytes_value).decode("ascii")
    return None
