"""collect's reading of the dialects (`_core.dialects`) over a trace: each span a selected
dialect claims, outside any job, is a unit with its descendants, given the model's meaning as
the processor's interpreter gives it when the unit's span ends (`_core.interpreter`)."""

from __future__ import annotations

from collections.abc import Sequence

from .._core.dialects import Dialects
from .._core.dialects.mapping import JobMapping
from .._core.facts import SpanFacts
from ..attributes import JOB_EVENT_TYPE, JOB_ID

__all__ = ["DIALECT_ATTRIBUTE", "JobMapping", "claimed", "recognise_trace", "units"]

# Kept on a job span a dialect named (`units`): its job is read from its end, as a unit's.
DIALECT_ATTRIBUTE = "otel_jobsteps.dialect_job"


def claimed(span: SpanFacts, dialects: Dialects) -> bool:
    """Whether ``span`` names no job of its own and a dialect may make it one."""
    attributes = span.attributes
    return (
        JOB_ID not in attributes
        and JOB_EVENT_TYPE not in attributes
        and dialects.may_start_job(span.name, span.kind, attributes) is not None
    )


def recognise_trace(spans: Sequence[SpanFacts], dialects: Dialects) -> list[SpanFacts]:
    """The spans of one trace (one fact per span id) with each unit's spans (`units`) given
    their meaning by its dialect."""
    found = units(spans, dialects)
    if not found:
        return list(spans)  # most traces: no span a dialect claims
    mapped: dict[int, SpanFacts] = {}
    for unit in found:
        for meant in dialects.recognise(unit):
            mapped[meant.span_id] = meant
    return [mapped.get(span.span_id, span) for span in spans]


def units(spans: Sequence[SpanFacts], dialects: Dialects) -> list[list[SpanFacts]]:
    """The units of one trace (one fact per span id): a claimed span outside any job or other
    unit, then its descendants in the order they started (the order the processor's
    interpreter holds them in)."""
    roots = [span for span in spans if claimed(span, dialects)] if dialects else []
    if not roots:
        return []  # the family trees are built only for a trace with a claimed span
    children: dict[int, list[SpanFacts]] = {}
    for span in spans:
        if span.parent_span_id:
            children.setdefault(span.parent_span_id, []).append(span)
    by_id = {span.span_id: span for span in spans}
    return [
        [span, *sorted(_descendants(span, children), key=_started)]
        for span in roots
        if not _inside_job_or_unit(span, by_id, dialects)
    ]


def _inside_job_or_unit(span: SpanFacts, by_id: dict[int, SpanFacts], dialects: Dialects) -> bool:
    """Whether an ancestor received is a job span or a unit of its own (the outermost wins)."""
    seen = {span.span_id}
    parent = by_id.get(span.parent_span_id)
    while parent is not None and parent.span_id not in seen:
        if JOB_ID in parent.attributes or claimed(parent, dialects):
            return True
        seen.add(parent.span_id)
        parent = by_id.get(parent.parent_span_id)
    return False


def _descendants(span: SpanFacts, children: dict[int, list[SpanFacts]]) -> list[SpanFacts]:
    found: list[SpanFacts] = []
    stack = list(children.get(span.span_id, ()))
    seen = {span.span_id}
    while stack:
        child = stack.pop()
        if child.span_id in seen:
            continue
        seen.add(child.span_id)
        found.append(child)
        stack.extend(children.get(child.span_id, ()))
    return found


def _started(span: SpanFacts) -> tuple[int, int]:
    return span.start_ns, span.span_id
