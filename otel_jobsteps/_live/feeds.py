"""Whether an SDK provider, tracer or span feeds a `JobStepsProcessor` (without importing it),
or exports its spans by OTLP (to ``otel-jobsteps collect``, or a Collector in front of it).

The sugar (`otel_jobsteps.context`) asks this, and must not load the write path to do so.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

__all__ = ["exports_by_otlp", "feeds_job_steps"]

_PROCESSOR_MODULE = "otel_jobsteps.processor"
_OTLP_EXPORTER_MODULES = "opentelemetry.exporter.otlp."


def _span_processors(processor: object) -> Iterator[object]:
    """``processor`` and, through the SDK's multi processors, every processor inside it."""
    yield processor
    for child in getattr(processor, "_span_processors", None) or ():
        yield from _span_processors(child)


def _active(owner: object) -> object | None:
    """The SDK's (private) multi span processor of a provider, tracer or span; None if absent."""
    active = getattr(owner, "_active_span_processor", None) or getattr(
        owner, "_span_processor", None
    )
    return active if hasattr(active, "_span_processors") else None


def _exporter(processor: object) -> object:
    """The exporter of a `SimpleSpanProcessor` or a `BatchSpanProcessor` (private fields)."""
    batch = getattr(processor, "_batch_processor", None)
    return getattr(processor, "span_exporter", None) or getattr(batch, "_exporter", None)


def exports_by_otlp(owner: object) -> bool:
    """Whether the SDK provider, tracer or span ``owner`` hands its spans to an OTLP exporter
    (``OTEL_TRACES_EXPORTER=otlp``): ``collect`` may record their steps."""
    active = _active(owner)
    return active is not None and any(
        type(_exporter(p)).__module__.startswith(_OTLP_EXPORTER_MODULES)
        for p in _span_processors(active)
    )


def feeds_job_steps(owner: object) -> bool | None:
    """Whether the SDK provider, tracer or span ``owner`` feeds a `JobStepsProcessor`.

    None when that cannot be told: not an SDK object, or an SDK without the (private) active
    span processor this reads.
    """
    active = _active(owner)
    if active is None:
        return None
    # No processor exists until its module is imported: look the class up, never import it.
    kind = getattr(sys.modules.get(_PROCESSOR_MODULE), "JobStepsProcessor", None)
    if not isinstance(kind, type):
        return False
    return any(isinstance(p, kind) for p in _span_processors(active))
