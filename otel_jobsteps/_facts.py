"""What is known about a span or a log record, before any interpretation.

Both doors produce these (live SDK objects, decoded OTLP requests); `_translate` decides what
they mean."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from ._spans import EventLike, attribute_dict, ended_events, plain_attributes
from .attributes import JOB_ID

__all__ = [
    "RESOURCE_ATTRIBUTES",
    "EventLike",
    "LogFacts",
    "SpanEvent",
    "SpanFacts",
    "ended_facts",
    "log_facts",
    "log_fields",
    "resource_values",
    "severity_value",
    "span_fields",
    "started_facts",
]


# The resource attributes kept per attempt (its final row), as the job span's attributes carry
# them between a door and the translation: under these names, which job code does not set.
RESOURCE_KEYS = ("service.name", "service.version", "host.name", "service.instance.id")
RESOURCE_ATTRIBUTES = tuple(f"otel_jobsteps.resource.{key}" for key in RESOURCE_KEYS)


def resource_values(resource: Mapping[str, Any]) -> dict[str, str]:
    """The kept resource attributes of ``resource`` that are text, under their reserved names."""
    return {
        name: value
        for key, name in zip(RESOURCE_KEYS, RESOURCE_ATTRIBUTES, strict=True)
        if isinstance(value := resource.get(key), str)
    }


class SpanEvent(NamedTuple):
    """One decoded span event: a progress snapshot, an ``exception``, or anything else."""

    name: str
    time_ns: int
    attributes: Mapping[str, Any]


@dataclass(slots=True)
class SpanFacts:
    """One span as a door saw it: ids, name, times, attributes, events, status.

    Read-only by convention: a frozen dataclass costs a microsecond per span.
    """

    trace_id: int
    span_id: int
    parent_span_id: int  # 0 for a root span
    name: str
    start_ns: int
    end_ns: int  # 0 while the span has not ended (a live start, or a start marker)
    attributes: Mapping[str, Any]
    events: Sequence[EventLike] = ()
    error: bool = False
    status_message: str | None = None


def span_fields(span: ReadableSpan, *, ended: bool, events: Sequence[Any] = ()) -> tuple[Any, ...]:
    """A live span's `SpanFacts` fields, in order: as at its start (only what on_start could
    know), or ended with ``events`` (its final attributes, events and status)."""
    context = span.context
    parent = span.parent
    parent_id = 0 if parent is None else parent.span_id
    start_ns = span.start_time or 0
    attributes = attribute_dict(span)
    if not ended:
        return (context.trace_id, context.span_id, parent_id, span.name, start_ns, 0, attributes)
    status = span.status
    if JOB_ID in attributes and span.resource is not None:
        attributes = {**attributes, **resource_values(span.resource.attributes)}
    return (
        context.trace_id,
        context.span_id,
        parent_id,
        span.name,
        start_ns,
        span.end_time or start_ns,
        attributes,
        events,
        status.status_code is StatusCode.ERROR,
        status.description,
    )


def started_facts(span: ReadableSpan) -> SpanFacts:
    """A live span at its start, read on the writer's side."""
    return SpanFacts(*span_fields(span, ended=False))


def ended_facts(span: ReadableSpan) -> SpanFacts:
    """A live span once it has ended."""
    return SpanFacts(*span_fields(span, ended=True, events=ended_events(span)))


@dataclass(slots=True)
class LogFacts:
    """One log record as a door saw it: its span context, time, severity, body, attributes."""

    trace_id: int  # 0: the record has no span context
    span_id: int  # 0: no span context
    time_ns: int  # the record's timestamp; its observed timestamp when that is 0
    event_name: str | None  # "progress" makes it a progress snapshot
    severity_number: int  # OTel SeverityNumber 0..24 (0 = unspecified)
    severity_text: str | None
    body: Any  # decoded AnyValue: str, int, float, bool, bytes, list, dict, None
    attributes: Mapping[str, Any]


def sdk_log_record(item: Any) -> Any:
    """The log record inside what an SDK hands a processor: a ``ReadWriteLogRecord`` (1.39+)
    or ``LogData`` (earlier) holds it as ``log_record``; a bare record is itself."""
    return getattr(item, "log_record", item)


def severity_value(severity: Any) -> int:
    """A SeverityNumber's number: the enum's documented ``_value_`` (``.value`` is a descriptor
    call, ten times slower on the job's thread); 0 for None."""
    if severity is None:
        return 0
    value = getattr(severity, "_value_", None)
    return value if type(value) is int else int(severity.value)


def log_fields(item: Any) -> tuple[Any, ...]:
    """An SDK log record's `LogFacts` fields, in order (read on the writer's side)."""
    record = getattr(item, "log_record", item)  # sdk_log_record, inlined: once per record
    event_name = getattr(record, "event_name", None)  # the SDK has it since 1.31
    return (
        record.trace_id or 0,
        record.span_id or 0,
        record.timestamp or record.observed_timestamp or 0,
        event_name or None,
        severity_value(record.severity_number),
        record.severity_text,
        record.body,
        plain_attributes(record.attributes),
    )


def log_facts(item: Any) -> LogFacts:
    """A live log record (``ReadWriteLogRecord``, ``LogData`` or ``LogRecord``) as facts."""
    return LogFacts(*log_fields(item))
