"""The places that reach into the OpenTelemetry SDK's private span state, kept together.

Each is speed the public API cannot give (a plain dict lookup, an event count without a copy)
and falls back to public behaviour when the SDK's internals look different."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util import BoundedList

__all__ = [
    "EventLike",
    "attribute_dict",
    "ended_events",
    "events_added",
    "latest_progress",
    "newest_progress_event",
    "plain_attributes",
]

_EMPTY: Mapping[str, Any] = {}


def plain_attributes(attributes: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The plain dict inside the SDK's ``BoundedAttributes``, read-only by convention."""
    plain = getattr(attributes, "_dict", None)
    if type(plain) is dict:
        return plain
    return attributes or _EMPTY


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
    return _first_progress(reversed(span.events))


class EventLike(Protocol):
    """What the translation reads of a span event (the SDK's ``Event`` has it too)."""

    @property
    def name(self) -> str: ...
    @property
    def attributes(self) -> Mapping[str, Any] | None: ...


_E = TypeVar("_E", bound=EventLike)


def latest_progress(newest_first: Iterable[EventLike]) -> Mapping[str, Any]:
    """The attributes of the newest event that is not an ``exception``; empty if none."""
    event = _first_progress(newest_first)
    return _EMPTY if event is None else plain_attributes(event.attributes)


def events_read(events: Sequence[_E]) -> list[_E]:
    """The events the translation reads, in order: the newest ``exception`` and the newest
    other one (progress). A span's other events change nothing it writes."""
    kept: list[_E] = []
    exception = progress = False
    for event in reversed(events):
        if event.name == "exception":
            if not exception:
                exception = True
                kept.append(event)
        elif not progress:
            progress = True
            kept.append(event)
        if exception and progress:
            break
    kept.reverse()
    return kept


def _first_progress(newest_first: Iterable[_E]) -> _E | None:
    for event in newest_first:
        if event.name != "exception":
            return event
    return None
