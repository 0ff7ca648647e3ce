"""What the translation reads of span events, the same for both doors: the newest progress
snapshot, the events that change a row. Duck-typed: no SDK import; a mapping that keeps a plain
dict inside (the SDK's ``BoundedAttributes``) is read through it, for speed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

__all__ = [
    "DIALECT_EVENTS",
    "EventLike",
    "events_read",
    "first_progress",
    "latest_progress",
    "plain_attributes",
]


_EMPTY: Mapping[str, Any] = {}


def plain_attributes(attributes: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The plain dict inside the SDK's ``BoundedAttributes``, read-only by convention."""
    if type(attributes) is dict:
        return attributes  # the facts' own (both doors' decoded events)
    plain = getattr(attributes, "_dict", None)
    if type(plain) is dict:
        return plain
    return attributes or _EMPTY


class EventLike(Protocol):
    """What the translation reads of a span event (the SDK's ``Event`` has it too)."""

    @property
    def name(self) -> str: ...
    @property
    def attributes(self) -> Mapping[str, Any] | None: ...


_E = TypeVar("_E", bound=EventLike)


class _Named(Protocol):
    """What choosing the events read looks at: a name (the SDK's events and OTLP's both)."""

    @property
    def name(self) -> str: ...


_N = TypeVar("_N", bound=_Named)


def latest_progress(newest_first: Iterable[EventLike]) -> Mapping[str, Any]:
    """The attributes of the newest event that is not an ``exception``; empty if none."""
    for event in newest_first:
        if event.name != "exception":
            return plain_attributes(event.attributes)
    return _EMPTY


# Events a dialect reads besides (BullMQ's ``job failed``: `_core.dialects.bullmq`).
DIALECT_EVENTS = frozenset({"job failed"})


def events_read(events: Sequence[_N]) -> list[_N]:
    """The events read of a span, in order, the same in both doors: the newest ``exception``,
    the newest other one (progress), and those a dialect reads (`DIALECT_EVENTS`) newer than
    both (a queue library adds its own at the attempt's end). A span's other events change
    nothing written."""
    kept: list[_N] = []
    exception = progress = False
    for event in reversed(events):
        name = event.name
        if name == "exception":
            if not exception:
                exception = True
                kept.append(event)
        elif not progress:
            progress = True
            kept.append(event)
        elif name in DIALECT_EVENTS:
            kept.append(event)
        if exception and progress:
            break
    kept.reverse()
    return kept


def first_progress(newest_first: Iterable[_E]) -> _E | None:
    for event in newest_first:
        if event.name != "exception":
            return event
    return None
