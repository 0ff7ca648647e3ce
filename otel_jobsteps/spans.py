"""The places that reach into the OpenTelemetry SDK's private span state, kept together.

Both are speed or reach the public API cannot give: a plain dict lookup instead of a
Mapping ``get`` that raises and catches KeyError on every miss, and an event hook the SDK does
not have. Each falls back to public behaviour when the SDK's internals look different.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util import BoundedList

__all__ = ["attribute_dict", "plain_attributes", "watch_events"]

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


class _WatchedEvents(BoundedList):  # type: ignore[type-arg]
    """The SDK's event list of one span, also reporting each non-exception event added."""

    _notify: Callable[[Any, Event], None]
    _tag: Any

    def append(self, item: Event) -> None:
        BoundedList.append(self, item)
        if item.name != "exception":
            self._notify(self._tag, item)


def watch_events(span: ReadableSpan, notify: Callable[[Any, Event], None], tag: Any) -> bool:
    """Call ``notify(tag, event)`` for every event added to ``span`` from now on.

    Returns False when the SDK's span looks different. The SDK's own list object stays in
    place (only its class is swapped): nothing is copied or allocated per span.
    """
    events = getattr(span, "_events", None)
    if type(events) is not BoundedList:
        return False
    events.__class__ = _WatchedEvents
    events._notify = notify  # type: ignore[attr-defined]
    events._tag = tag  # type: ignore[attr-defined]
    return True
