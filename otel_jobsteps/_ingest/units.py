"""A dialect's unit read once, when its span's ended copy arrives: the unit's spans (that copy,
the request's spans and the staged ones still waiting for a place in its trace) are given their
meaning (`mapping.recognise_trace`), and each span whose meaning changed is kept with it, as if
its code had set those attributes: placing, deriving and resuming then read ordinary job spans.
The processor's interpreter reads a unit at the same moment, its span's end (`_core.interpreter`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from psycopg.types.json import Jsonb

from .._core.dialects import Dialects
from .._core.facts import SpanFacts
from .._core.limits import step_key_text
from ..attributes import JOB_ID, JOB_STEP_KEY
from .decode import any_value, decode_span
from .ids import ID_MASK
from .mapping import DIALECT_ATTRIBUTE, claimed, recognise_trace
from .place import Staged, skeleton
from .rows import SpanRow
from .session import Session

__all__ = ["recognised_units", "unit_ended"]

Key = tuple[str, int, int]  # trace, signed span id, phase


def unit_ended(rows: list[SpanRow], dialects: Dialects) -> bool:
    """Whether one of ``rows`` is the ended copy of a span a dialect may make a job."""
    return bool(dialects) and any(row.phase and claimed(row.facts, dialects) for row in rows)


def recognised_units(
    session: Session, fresh: list[SpanRow], staged: dict[Key, Staged], dialects: Dialects
) -> list[SpanRow]:
    """``fresh`` with the units whose span ended in them given their meaning; staged spans of
    those units are changed in place (their rows and ``staged``). ``staged`` holds every staged
    span of their traces."""
    traces = sorted({row.trace for row in fresh if row.phase and claimed(row.facts, dialects)})
    if not traces:
        return fresh
    waiting: dict[tuple[str, int], bytes] = {}
    by_trace: dict[str, dict[int, SpanFacts]] = {trace: {} for trace in traces}
    for trace, span_id, body in session.execute("waiting_bodies", {"trace_id": traces}):
        waiting[(trace, span_id & ID_MASK)] = body = bytes(body)
        by_trace[trace][span_id & ID_MASK] = decode_span(body)
    fresh_ended = {(row.trace, row.span_id & ID_MASK): row for row in fresh if row.phase}
    for (trace, span_id), row in fresh_ended.items():
        if trace in by_trace:
            by_trace[trace][span_id] = row.facts
    changed: dict[tuple[str, int], SpanFacts] = {}
    originals: dict[tuple[str, int], SpanFacts] = {}
    for trace, spans in by_trace.items():
        group = list(spans.values())
        for before, after in zip(group, recognise_trace(group, dialects), strict=True):
            if after is not before:
                changed[(trace, after.span_id)] = _marked(after, before)
                originals[(trace, after.span_id)] = before
    if not changed:
        return fresh
    _reshape_staged(session, staged, changed, originals, waiting, dialects)
    kept = []
    for row in fresh:
        meant = changed.get((row.trace, row.span_id & ID_MASK)) if row.phase else None
        if meant is None:
            kept.append(row)
        else:
            kept.append(row._replace(facts=meant, wire=row.wire + _extra(row.facts, meant)))
    return kept


def _marked(after: SpanFacts, before: SpanFacts) -> SpanFacts:
    """A span a dialect gave a job of its own says so (``DIALECT_ATTRIBUTE``): it is read from
    its end, as the processor reads a unit."""
    if JOB_ID in after.attributes and JOB_ID not in before.attributes:
        return replace(after, attributes={**after.attributes, DIALECT_ATTRIBUTE: True})
    return after


def _reshape_staged(
    session: Session,
    staged: dict[Key, Staged],
    changed: Mapping[tuple[str, int], SpanFacts],
    originals: Mapping[tuple[str, int], SpanFacts],
    waiting: Mapping[tuple[str, int], bytes],
    dialects: Dialects,
) -> None:
    """Keep the staged spans' new meaning: their bodies, skeletons and step keys."""
    columns: dict[str, list[Any]] = {
        name: [] for name in ("trace_id", "span_id", "body", "kind", "own", "step_key")
    }
    for key, span in staged.items():
        trace, span_id, phase = key
        node = (trace, span_id & ID_MASK)
        meant = changed.get(node)
        if not phase or meant is None or node not in waiting or span.new is not None:
            continue
        shape = skeleton(meant, dialects)
        step_key = _step_key(meant)
        staged[key] = Staged(shape, span.place, span.gone, step_key=step_key)
        columns["trace_id"].append(trace)
        columns["span_id"].append(span_id)
        columns["body"].append(waiting[node] + _extra(originals[node], meant))
        columns["kind"].append(shape.kind)
        columns["own"].append(None if shape.own is None else Jsonb(list(shape.own)))
        columns["step_key"].append(step_key)
    if columns["trace_id"]:
        session.execute("reshape_spans", columns)


def _step_key(facts: SpanFacts) -> str | None:
    key = facts.attributes.get(JOB_STEP_KEY)
    return None if key is None else step_key_text(key)


def _extra(before: SpanFacts, after: SpanFacts) -> bytes:
    """What turns ``before``'s bytes into ``after``'s: a serialized message followed by more of
    its fields is that message with them (an attribute given twice: the later value stands)."""
    added = [
        KeyValue(key=name, value=any_value(value))
        for name, value in after.attributes.items()
        if name not in before.attributes or before.attributes[name] != value
    ]
    extra = Span(attributes=added)
    if (after.error, after.status_message) != (before.error, before.status_message):
        code = Status.STATUS_CODE_ERROR if after.error else Status.STATUS_CODE_UNSET
        extra.status.CopyFrom(Status(code=code, message=after.status_message or ""))
    return extra.SerializeToString()
