"""What several dialects share: jobs and steps nested in a unit, a step's detail as JSON."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..facts import SpanFacts

__all__ = ["detail_json", "nest"]

_JOB, _STEP = 1, 2


def nest(
    unit: Sequence[SpanFacts],
    as_job: Callable[[SpanFacts], SpanFacts | None],
    as_step: Callable[[SpanFacts], SpanFacts | None],
) -> list[SpanFacts]:
    """``unit`` with each span ``as_job`` makes a job (anywhere: a job in a step is a job of its
    own) and each span ``as_step`` makes a step where it lies in a job and in no step (a step is
    never opened inside another: it would close its parent); the rest as they are. Unchanged if
    the unit's root is not a job."""
    role: dict[int, int] = {}  # span id -> the nearest job or step it is in, or is
    mapped: list[SpanFacts] = []
    for index, span in enumerate(unit):
        above = role.get(span.parent_span_id, 0) if index else 0
        if (job := as_job(span)) is not None:
            role[span.span_id] = _JOB
            mapped.append(job)
        elif not index:
            return list(unit)
        elif above == _JOB and (step := as_step(span)) is not None:
            role[span.span_id] = _STEP
            mapped.append(step)
        else:
            if above:
                role[span.span_id] = above
            mapped.append(span)
    return mapped


def detail_json(detail: Mapping[str, Any]) -> str:
    """``job.step.detail`` of a dialect's step: its values that are set, as a JSON object (a
    value JSON cannot hold, such as bytes, as its text)."""
    return json.dumps({k: v for k, v in detail.items() if v is not None}, default=str)
