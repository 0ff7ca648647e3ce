"""RecordJobsSampler: every job and step reaches the processor whatever the trace sampling.

The processor decides at a span's start whether it opens or lies in a job scope, from the
attributes the span starts with; a dropped span is not recorded at all, and the SDK's own
`AlwaysRecordSampler` records one without its attributes (it copies them from the DROP result,
which has none). This sampler keeps the root's decision, except that a DROP for a span of a job
scope is recorded (RECORD_ONLY) with its attributes, so exporters still see only sampled spans.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanKind, get_current_span
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

from ._core.dialects import Dialects, select_dialects
from ._core.dialects.base import KIND_INTERNAL
from ._live.fields import otlp_kind
from .attributes import JOB_EVENT_TYPE, JOB_ID, JOB_STEP_KEY
from .errors import ConfigurationError, printable

__all__ = ["ENTRY_POINT", "RecordJobsSampler", "parentbased_traceidratio"]

ENTRY_POINT = "otel_jobsteps_parentbased_traceidratio"
"""The `opentelemetry_traces_sampler` entry point's name, for ``OTEL_TRACES_SAMPLER``."""


_NO_ATTRIBUTES: Mapping[str, Any] = {}
_DROP = Decision.DROP


class RecordJobsSampler(Sampler):
    """The root sampler's decision, except that a span of a job scope it drops is recorded,
    unsampled, with its attributes: the processor sees every job and step, exporters do not.

    A span is of a job scope when it names a job (``job.id``, ``job.step.key``,
    ``job.event.type``), when one of ``dialects`` may claim it as a job (as the processor's
    option: a comma list, ``all`` or ``none``; None reads ``OTEL_JOBSTEPS_DIALECTS``, unset:
    the default set), or when its parent is a recording span that is not sampled (one this
    sampler kept: a step or a plain span in a job). Every other span keeps the root's result.
    """

    def __init__(self, root: Sampler, *, dialects: str | Sequence[str] | None = None) -> None:
        if not isinstance(root, Sampler):
            raise ConfigurationError(
                f"RecordJobsSampler needs an OpenTelemetry Sampler, got {type(root).__name__}"
            )
        self._root = root
        if dialects is None:
            dialects = os.environ.get("OTEL_JOBSTEPS_DIALECTS")
        selected = select_dialects(dialects)
        self._dialects: Dialects | None = selected if selected else None  # none: no call

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        result = self._root.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )
        if result.decision is not _DROP:
            return result
        # Of a job scope: it names a job, else its parent is one this sampler kept (recording,
        # unsampled), else a dialect may claim it. Cheapest first: outside jobs, all three run.
        if not (
            attributes
            and (JOB_ID in attributes or JOB_STEP_KEY in attributes or JOB_EVENT_TYPE in attributes)
        ):
            parent = get_current_span(parent_context)
            if not parent.is_recording() or parent.get_span_context().trace_flags.sampled:
                dialects = self._dialects
                if dialects is None:
                    return result
                # No kind is INTERNAL, as in the SDK.
                number = KIND_INTERNAL if kind is None else otlp_kind(kind)
                if dialects.may_start_job(name, number, attributes or _NO_ATTRIBUTES) is None:
                    return result
        if result.attributes:  # a root that adds attributes even to a DROP: kept beside them
            attributes = {**(attributes or {}), **result.attributes}
        return SamplingResult(Decision.RECORD_ONLY, attributes, result.trace_state)

    def get_description(self) -> str:
        return f"RecordJobsSampler{{{self._root.get_description()}}}"


def parentbased_traceidratio(argument: str | None) -> RecordJobsSampler:
    """``RecordJobsSampler(ParentBased(TraceIdRatioBased(ratio)))``: what the entry point builds
    from ``OTEL_TRACES_SAMPLER_ARG`` (unset or empty: 1.0, as the SDK's own samplers default)."""
    return RecordJobsSampler(ParentBased(TraceIdRatioBased(_ratio(argument))))


def _ratio(argument: str | None) -> float:
    """The sampling ratio of ``OTEL_TRACES_SAMPLER_ARG``; anything but a number from 0 to 1 is a
    ConfigurationError (the SDK's own samplers fall back to 1.0 with a warning)."""
    if argument is None or not argument.strip():
        return 1.0
    try:
        ratio = float(argument)
    except ValueError:
        ratio = math.nan
    if not 0.0 <= ratio <= 1.0:  # NaN fails this too
        raise ConfigurationError(
            f"OTEL_TRACES_SAMPLER_ARG for {ENTRY_POINT} must be a ratio from 0 to 1"
            f" (e.g. 0.05), got {printable(repr(argument))}"
        )
    return ratio
