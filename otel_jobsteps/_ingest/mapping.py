"""collect's names for the dialects it has always applied (BullMQ and the user's ``--mapping``
rules), kept for its call sites until they reach the dialects through the one interpreter."""

from __future__ import annotations

from collections.abc import Sequence

from .._core.dialects import select_dialects
from .._core.dialects.bullmq import BULLMQ_FAILED_EVENT, BULLMQ_JOB_ID, BULLMQ_OPERATION
from .._core.dialects.mapping import JobMapping
from .._core.facts import SpanFacts
from ..attributes import JOB_EVENT_TYPE, JOB_ID

__all__ = ["BULLMQ_FAILED_EVENT", "BULLMQ_JOB_ID", "BULLMQ_OPERATION", "JobMapping", "map_trace"]

_BULLMQ = select_dialects("bullmq")


def map_trace(spans: Sequence[SpanFacts], mappings: Sequence[JobMapping] = ()) -> list[SpanFacts]:
    """The spans of one trace (one fact per span id) with BullMQ's and the ``mappings``' job
    spans given their ``job.*`` names: each such span's own dialect sees it and its children."""
    dialects = _BULLMQ.with_mappings(mappings)
    children: dict[int, list[SpanFacts]] = {}
    for span in spans:
        if span.parent_span_id:
            children.setdefault(span.parent_span_id, []).append(span)
    mapped: dict[int, SpanFacts] = {}
    for span in spans:
        attributes = span.attributes
        if JOB_ID in attributes or JOB_EVENT_TYPE in attributes:
            continue
        dialect = dialects.may_start_job(span.name, span.kind, attributes)
        if dialect is not None:
            family = (span, *children.get(span.span_id, ()))
            unit = [mapped.get(each.span_id, each) for each in family]
            for before, after in zip(unit, dialect.recognise(unit), strict=True):
                if after is not before:
                    mapped[after.span_id] = after
    return [mapped.get(span.span_id, span) for span in spans]
