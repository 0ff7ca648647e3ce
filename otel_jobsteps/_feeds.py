"""Whether an SDK provider, tracer or span feeds a `JobStepsProcessor`, without importing it.

The sugar (`otel_jobsteps.context`) asks this, and must not load the write path to do so.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

__all__ = ["feeds_job_steps"]

_PROCESSOR_MODULE = "otel_jobsteps.processor"


def _span_processors(processor: object) -> Iterator[object]:
    """``processor`` and, through the SDK's multi processors, every processor inside it."""
    yield processor
    for child in getattr(processor, "_span_processors", None) or ():
        yield from _span_processors(child)


def feeds_job_steps(owner: object) -> bool | None:
    """Whether the SDK provider, tracer or span ``owner`` feeds a `JobStepsProcessor`.

    None when that cannot be told: not an SDK object, or an SDK without the (private) active
    span processor this reads.
    """
    active = getattr(owner, "_active_span_processor", None) or getattr(
        owner, "_span_processor", None
    )
    if active is None or not hasattr(active, "_span_processors"):
        return None
    # No processor exists until its module is imported: look the class up, never import it.
    kind = getattr(sys.modules.get(_PROCESSOR_MODULE), "JobStepsProcessor", None)
    if not isinstance(kind, type):
        return False
    return any(isinstance(p, kind) for p in _span_processors(active))
