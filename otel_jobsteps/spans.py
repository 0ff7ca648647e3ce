"""The places that reach into the OpenTelemetry SDK's private span state, kept together.

Both are speed or reach the public API cannot give: a plain dict lookup instead of a
Mapping ``get`` that raises and catches KeyError on every miss, and an event hook the SDK does
not have. Each falls back to public behaviour when the SDK's internals look different.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util import BoundedList

__all__ = [
    "LatestProgress",
    "attribute_dict",
    "latest_progress",
    "plain_attributes",
    "watch_events",
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
    return plain_attributes(getattr(span, "_attributes", None) or span.attributes)


LatestProgress = Callable[[], Mapping[str, Any]]


class _WatchedEvents(BoundedList):  # type: ignore[type-arg]
    """The SDK's event list of one span, reporting progress events as they are added.

    Only the first event since the last read is reported: the reader then takes the latest
    event from the list itself, so a burst of events costs the job one queued command.
    """

    _notify: Callable[[Any, LatestProgress], None]
    _tag: Any
    _armed: bool

    def append(self, item: Event) -> None:
        BoundedList.append(self, item)
        if self._armed and item.name != "exception":
            self._armed = False
            self._notify(self._tag, self.take_latest)

    def take_latest(self) -> Mapping[str, Any]:
        """The latest progress event's attributes; the next event is reported again.

        Runs on the writer thread while the job thread may append: the scan holds the list's
        own lock (the one its append takes), since iterating a deque that grows raises.
        """
        self._armed = True  # before reading: an event added meanwhile is either seen or reported
        with self._lock:  # type: ignore[attr-defined]
            return latest_progress(reversed(self._dq))  # type: ignore[attr-defined]


def latest_progress(newest_first: Iterable[Event]) -> Mapping[str, Any]:
    """The attributes of the newest event that is not an ``exception``; empty if none."""
    for event in newest_first:
        if event.name != "exception":
            return plain_attributes(event.attributes)
    return _EMPTY


def watch_events(
    span: ReadableSpan, notify: Callable[[Any, LatestProgress], None], tag: Any
) -> bool:
    """Call ``notify(tag, take_latest)`` when a progress event is added to ``span``.

    ``take_latest()`` returns the newest progress event's attributes and re-arms the report.
    Returns False when the SDK's span looks different. The SDK's own list object stays in
    place (only its class is swapped): nothing is copied.
    """
    events = getattr(span, "_events", None)
    if type(events) is not BoundedList:
        return False
    events.__class__ = _WatchedEvents
    events._notify = notify  # type: ignore[attr-defined]
    events._tag = tag  # type: ignore[attr-defined]
    events._armed = True  # type: ignore[attr-defined]
    return True
