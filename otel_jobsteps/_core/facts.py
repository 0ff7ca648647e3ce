"""What is known about a span or a log record, before any interpretation.

Both doors produce these (live SDK objects, decoded OTLP requests); `_core.translate` decides what
they mean."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from .events import EventLike

__all__ = [
    "NO_RESOURCE",
    "RESOURCE_ATTRIBUTES",
    "EventLike",
    "LogFacts",
    "SpanEvent",
    "SpanFacts",
    "resource_values",
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


# The resource of a span whose door did not say (shared: read-only).
NO_RESOURCE: Mapping[str, Any] = MappingProxyType({})


def _no_resource() -> Mapping[str, Any]:
    return NO_RESOURCE


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
    kind: int = 0  # OTLP's SpanKind number (dialects.base.KIND_*); 0 = unspecified
    resource: Mapping[str, Any] = field(default_factory=_no_resource)  # the resource's attributes


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
