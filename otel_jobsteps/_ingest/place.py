"""Which job attempt each received span belongs to, as the translation would scope it live.

A job span belongs to its own attempt; a span inside one (through parents received, in its
trace) to that attempt; an event span to its parent's attempt, or else to the job it names
itself; anything else waits (no place yet) for a parent still to come. Placing needs only ids
and what a span names itself, so staging keeps that per span and never decodes it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from .._core.commands import EventRecorded, JobStarted
from .._core.dialects import Dialects
from .._core.facts import SpanFacts
from .._core.translate import SpanTranslator
from ..attributes import JOB_EVENT_TYPE, JOB_ID
from .mapping import claimed, recognise_trace
from .rows import SpanRow

__all__ = [
    "EVENT",
    "JOB",
    "NAMING_EVENT",
    "PLAIN",
    "Attempt",
    "Skeleton",
    "Staged",
    "place",
    "skeleton",
]

Attempt = tuple[str, str, int]  # domain, job id, attempt

PLAIN, JOB, EVENT, NAMING_EVENT = 0, 1, 2, 3


class Skeleton(NamedTuple):
    """What placing needs of a span: its parent, its kind and the attempt it names itself."""

    parent: int
    kind: int
    own: Attempt | None


@dataclass(slots=True)
class Staged:
    """A span of a locked trace as staged (from its skeleton row) or new in this request
    (``new``: its key, facts and bytes as received)."""

    skeleton: Skeleton
    place: Attempt | None
    gone: bool = False  # its attempt is settled: only the row is kept
    new: SpanRow | None = None
    step_key: str | None = None  # a step span's job.step.key (settled records find it)


def _ignore(kind: str, detail: object) -> None:
    """Problems are counted once, by the derivation (placing reads the same spans again)."""


def _not_late(span: SpanFacts) -> None:
    """Late attributes are counted by the derivation too. Given, so the translation holds no
    method of its own (a reference cycle: each skeleton freed only by the cyclic collector)."""


def skeleton(span: SpanFacts, dialects: Dialects) -> Skeleton:
    """The span's skeleton (another instrumentation's job span named as its dialect names
    it, from the span alone)."""
    names = span.attributes
    if JOB_ID in names or JOB_EVENT_TYPE in names:
        mapped = span  # a span naming a job or event itself is never a dialect's
    elif claimed(span, dialects):
        (mapped,) = recognise_trace([span], dialects)
    else:
        return Skeleton(span.parent_span_id, PLAIN, None)  # names no job: most spans
    found = SpanTranslator(problem=_ignore, late=_not_late).started(
        mapped
    )  # no parent known: its own scope
    own = None
    if found and isinstance(found[0], JobStarted | EventRecorded):
        scope = found[0].scope
        own = (scope.domain, scope.job_id, scope.attempt)
    if JOB_EVENT_TYPE in mapped.attributes:
        return Skeleton(span.parent_span_id, EVENT if own is None else NAMING_EVENT, own)
    return Skeleton(span.parent_span_id, PLAIN if own is None else JOB, own)


def place(
    nodes: Mapping[int, Skeleton], known: Mapping[int, Attempt | None] | None = None
) -> dict[int, Attempt | None]:
    """Per span id of one trace, the attempt it belongs to (None: no place yet); ``known``:
    places that stand (read, not computed again)."""
    places: dict[int, Attempt | None] = dict(known or {})
    for start in nodes:
        chain: list[int] = []
        seen: set[int] = set()
        span_id = start
        inherited: Attempt | None = None  # what the outermost span of the chain inherits
        while span_id not in places:
            node = nodes[span_id]
            if node.kind == JOB:
                places[span_id] = inherited = node.own
                break
            chain.append(span_id)
            seen.add(span_id)
            parent = nodes.get(node.parent)
            if parent is None or node.parent in seen or parent.kind in (EVENT, NAMING_EVENT):
                break  # outside any job (a child of an event span too, as live), or waiting
            span_id = node.parent
        else:
            inherited = places[span_id]
        for member in reversed(chain):  # only the innermost (the start) may be an event
            node = nodes[member]
            places[member] = inherited = (
                node.own if inherited is None and node.kind == NAMING_EVENT else inherited
            )
    return places
