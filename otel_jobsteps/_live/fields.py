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
from .spans import SPAN_ID, TRACE_ID, attribute_dict, span_state

__all__ = ["OTLP_KIND", "log_fields", "otlp_kind", "severity_value", "span_fields"]

_NO_RESOURCE: Mapping[str, Any] = {}
_ERROR = StatusCode.ERROR  # read once: an enum member read from its class costs a call
# The SDK's SpanKind as OTLP's number (the facts' `kind`): the enum's value plus one.
OTLP_KIND = {kind: kind.value + 1 for kind in SpanKind}


def span_fields(span: ReadableSpan, *, ended: bool, events: Sequence[Any] = ()) -> tuple[Any, ...]:
    """A live span's `SpanFacts` fields, in order: as at its start (only what on_start could
    know, up to its kind), or ended with ``events`` (its final attributes, events and status)
    and its resource's attributes (the SDK's read-only mapping: a dialect may read them)."""
    state = span_state(span)  # its properties without a call each: read on every span
    context = state["_context"]
    parent = state["_parent"]
    parent_id = 0 if parent is None else parent[SPAN_ID]
    start_ns = state["_start_time"] or 0
    attributes = attribute_dict(span)
    kind = otlp_kind(state["_kind"])
    if not ended:
        return (
            context[TRACE_ID], context[SPAN_ID], parent_id, state["_name"], start_ns, 0,
            attributes, (), False, None, kind,
        )  # fmt: skip
    status = state["_status"]
    resource = state["_resource"]
    if resource is None:
        resource_attributes = _NO_RESOURCE
    else:
        resource_attributes = resource.attributes
        if JOB_ID in attributes:
            attributes = {**attributes, **_resource_values(resource_attributes)}
    return (
        context[TRACE_ID],
        context[SPAN_ID],
        parent_id,
        state["_name"],
        start_ns,
        state["_end_time"] or start_ns,
        attributes,
        events,
        status.status_code is _ERROR,
        status.description,
        kind,
        resource_attributes,
    )


# The kept values of the latest resources read, by the SDK's object (kept with it: its id is
# never another's). A process has one or a few resources, and they are immutable.
_resources: dict[int, tuple[Mapping[str, Any], dict[str, str]]] = {}
MAX_RESOURCES = 16


def _resource_values(resource: Mapping[str, Any]) -> dict[str, str]:
    """`resource_values` of a resource's attributes, read once per resource: its job spans'
    ends would each pay for it on the job's thread."""
    known = _resources.get(id(resource))
    if known is not None and known[0] is resource:
        return known[1]
    values = resource_values(plain_attributes(resource))
    if len(_resources) >= MAX_RESOURCES:
        _resources.clear()
    _resources[id(resource)] = (resource, values)
    return values


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
