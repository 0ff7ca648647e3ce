"""A live SDK span or log record read as the fields of `SpanFacts` / `LogFacts`, in order: on
the writer's side (or the relay's), never on the job's thread."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from .._core.events import plain_attributes
from .._core.facts import resource_values
from ..attributes import JOB_ID
from .spans import attribute_dict

__all__ = ["OTLP_KIND", "log_fields", "otlp_kind", "severity_value", "span_fields"]

_NO_RESOURCE: Mapping[str, Any] = {}
# The SDK's SpanKind as OTLP's number (the facts' `kind`): the enum's value plus one.
OTLP_KIND = {kind: kind.value + 1 for kind in SpanKind}


def span_fields(span: ReadableSpan, *, ended: bool, events: Sequence[Any] = ()) -> tuple[Any, ...]:
    """A live span's `SpanFacts` fields, in order: as at its start (only what on_start could
    know, up to its kind), or ended with ``events`` (its final attributes, events and status)
    and its resource's attributes (the SDK's read-only mapping: a dialect may read them)."""
    context = span.context
    parent = span.parent
    parent_id = 0 if parent is None else parent.span_id
    start_ns = span.start_time or 0
    attributes = attribute_dict(span)
    kind = otlp_kind(span.kind)
    if not ended:
        return (
            context.trace_id, context.span_id, parent_id, span.name, start_ns, 0, attributes,
            (), False, None, kind,
        )  # fmt: skip
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
        kind,
        _NO_RESOURCE if span.resource is None else span.resource.attributes,
    )


def otlp_kind(kind: object) -> int:
    """The SDK's SpanKind as OTLP's number; 0 (unspecified) for anything else a caller passed
    (the SDK takes any value: ``start_span(name, context, {...})`` makes a dict the kind)."""
    return kind._value_ + 1 if type(kind) is SpanKind else 0  # _value_: no descriptor call


def severity_value(severity: Any) -> int:
    """A SeverityNumber's number: the enum's documented ``_value_`` (``.value`` is a descriptor
    call, ten times slower on the job's thread); 0 for None."""
    if severity is None:
        return 0
    value = getattr(severity, "_value_", None)
    return value if type(value) is int else int(severity.value)


def log_fields(item: Any) -> tuple[Any, ...]:
    """An SDK log record's `LogFacts` fields, in order (read on the writer's side)."""
    record = getattr(item, "log_record", item)  # a ReadWriteLogRecord (1.39+) or LogData holds it
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
