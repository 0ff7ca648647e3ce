"""The places that reach into the OpenTelemetry SDK's private span state, kept together.

Each is speed the public API cannot give (a plain dict lookup, an event count without a copy)
and falls back to public behaviour when the SDK's internals look different."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util import BoundedList

from .._core.events import first_progress, plain_attributes

__all__ = [
    "SPAN_ID",
    "TRACE_ID",
    "attribute_dict",
    "ended_events",
    "events_added",
    "newest_progress_event",
    "span_state",
]


# A SpanContext is a tuple (trace_id, span_id, ...) by its declaration in the API: an index
# instead of a property call, on every span's start.
TRACE_ID: Final = 0
SPAN_ID: Final = 1


def attribute_dict(span: ReadableSpan) -> Mapping[str, Any]:
    """The span's attributes as a plain mapping, read-only by convention."""
    attributes = getattr(span, "_attributes", None)
    # Not `or`: the truth of BoundedAttributes is a Python-level __len__ call.
    return plain_attributes(span.attributes if attributes is None else attributes)


# What `span_state` holds: the SDK's private name of each public property read of a span.
_PROPERTIES = {
    "_context": "context",
    "_parent": "parent",
    "_name": "name",
    "_start_time": "start_time",
    "_end_time": "end_time",
    "_kind": "kind",
    "_status": "status",
    "_resource": "resource",
}
_KEYS, _PUBLIC = _PROPERTIES.keys(), tuple(_PROPERTIES.values())


# The span classes seen to read each of those properties as ReadableSpan does, from the private
# name (`span_state`): a class that computes one otherwise has its properties read.
_PLAIN_SPANS: set[type] = set()


def span_state(span: ReadableSpan) -> Mapping[str, Any]:
    """The span's properties by the SDK's private names: its instance dict when its class
    reads them from there (a dict lookup instead of a property call each), else its properties."""
    kind = type(span)
    if kind in _PLAIN_SPANS or _plain(kind, span):
        state: dict[str, Any] = span.__dict__
        return state
    return {name: getattr(span, public) for name, public in _PROPERTIES.items()}


def _plain(kind: type, span: ReadableSpan) -> bool:
    """Whether the span's class has ReadableSpan's own properties and the span keeps every
    private name they read (asked once per class)."""
    state = getattr(span, "__dict__", None)
    if state is None or not state.keys() >= _KEYS:
        return False
    if any(getattr(kind, public) is not getattr(ReadableSpan, public) for public in _PUBLIC):
        return False
    _PLAIN_SPANS.add(kind)
    return True


def events_added(span: ReadableSpan) -> int:
    """How many events a live span has had so far: a cheap number to poll for a change.

    Not the list's length: the SDK drops the oldest events when the list is full.
    """
    events = getattr(span, "_events", None)
    if type(events) is BoundedList:
        return len(events._dq) + events.dropped  # type: ignore[attr-defined]
    return len(span.events) + span.dropped_events


def ended_events(span: ReadableSpan) -> Sequence[Event]:
    """The events of an ended span, not copied: the SDK adds none once the end time is set
    (``add_event`` checks it under the span's lock), so the list can no longer change."""
    events = getattr(span, "_events", None)
    if type(events) is BoundedList:
        dq: Sequence[Event] = events._dq  # type: ignore[attr-defined]
        return dq
    return span.events


def newest_progress_event(span: ReadableSpan) -> Event | None:
    """The newest event of a live span that is not an ``exception``, or None.

    ``span.events`` copies under the SDK's lock: the job thread may be adding events.
    """
    return first_progress(reversed(span.events))
