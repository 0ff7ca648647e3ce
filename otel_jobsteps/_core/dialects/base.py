"""What a dialect is, and the small helpers every dialect uses to give spans the model's meaning.

A dialect reads another instrumentation's spans (Celery's, the messaging conventions', ...) and
adds the ``job.*`` attributes the translation reads; a ``job.*`` attribute set by the code always
wins. Pure: spans in, spans out."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..facts import SpanFacts

__all__ = [
    "KIND_CLIENT",
    "KIND_CONSUMER",
    "KIND_INTERNAL",
    "KIND_PRODUCER",
    "KIND_SERVER",
    "KIND_UNSPECIFIED",
    "Dialect",
    "Gate",
    "children",
    "number",
    "with_defaults",
]

# OTLP span kinds (the proto's numbers; the live door converts the SDK's enum to these)
KIND_UNSPECIFIED, KIND_INTERNAL, KIND_SERVER, KIND_CLIENT, KIND_PRODUCER, KIND_CONSUMER = range(6)


@dataclass(frozen=True, slots=True)
class Dialect:
    """One way of recognising jobs and steps in another instrumentation's spans."""

    name: str  # as selected: "celery"
    source: str  # the instrumentation file and version it follows (docs/dialects.md)
    # Cheap test at a span's START, on the job's thread (a few dict lookups at most): may this
    # span be one of this dialect's jobs? Called only for spans with no valid job.* identity.
    may_start_job: Callable[[str, int, Mapping[str, Any]], bool]  # (name, kind, attributes)
    # The UNIT: the claimed span (first), then its descendants, all ENDED, in start order ->
    # the same spans with job.* attributes added (untouched spans returned as they are). A root
    # that is not a job after all comes back unchanged.
    recognise: Callable[[Sequence[SpanFacts]], list[SpanFacts]]
    # The span kinds may_start_job can say yes to (None: any): the others never ask it.
    kinds: frozenset[int] | None = None
    # What a span must have for may_start_job to say yes (None: nothing known): the spans
    # without it never ask, and most spans of an application pay one set test for them all.
    gate: Gate | None = None
    # Its source sets the attributes that claim a span just after starting it (DBOS): the live
    # door asks it again about a parent outside any job when the parent's first child starts.
    claims_late: bool = False


@dataclass(frozen=True, slots=True)
class Gate:
    """A dialect's claim at its cheapest: one of ``attributes`` is set, or the span's name
    starts with one of ``prefixes``. Necessary, not sufficient: may_start_job decides."""

    attributes: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()


def with_defaults(span: SpanFacts, values: Mapping[str, Any], **changes: Any) -> SpanFacts:
    """``span`` with each of ``values`` added where its attributes lack that name (the code's
    own ``job.*`` wins) and the other fields in ``changes``; ``span`` itself if nothing changes.

    A value of None is not added."""
    added = {
        name: value
        for name, value in values.items()
        if value is not None and name not in span.attributes
    }
    if not added and not changes:
        return span
    return replace(span, attributes={**span.attributes, **added}, **changes)


def children(unit: Sequence[SpanFacts], parent: SpanFacts) -> list[SpanFacts]:
    """The spans of ``unit`` whose parent is ``parent``, in the unit's order."""
    return [span for span in unit if span.parent_span_id == parent.span_id]


def number(value: object) -> int | None:
    """An int attribute, or a short string of ASCII digits as its int; else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 12:
        return int(value)
    return None
