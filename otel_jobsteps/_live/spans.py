"""The places that reach into the OpenTelemetry SDK's private span state, kept together.

Each is speed the public API cannot give (a plain dict lookup, an event count without a copy)
and falls back to public behaviour when the SDK's internals look different."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util import BoundedList

from .._core.events import first_progress, plain_attributes

__all__ = ["attribute_dict", "ended_events", "events_added", "newest_progress_event"]


def attribute_dict(span: ReadableSpan) -> Mapping[str, Any]:
    """The span's attributes as a plain mapping, read-only by convention."""
    attributes = getattr(span, "_attributes", None)
    # Not `or`: the truth of BoundedAttributes is a Python-level __len__ call.
    return plain_attributes(span.attributes if attributes is None else attributes)


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
