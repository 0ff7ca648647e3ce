"""The processor's own counters as OpenTelemetry metrics (no-ops without a MeterProvider)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

__all__ = ["PROBLEM_KINDS", "register_metrics"]

_DROPPED = "dropped_"
PROBLEM_KINDS = (
    "write_failed",
    "batch_rejected",
    "heartbeat_failed",
    "impossible_time",
    "internal_error",
    "invalid_job_span",
    "late_attributes",
    "shutdown_timeout",
)  # what otel_jobsteps.problems{kind} reports (collect: those of them it counts)


def register_metrics(source: Any, meter_provider: metrics.MeterProvider | None = None) -> None:
    """Observe ``source.stats()`` through instruments of the ``otel_jobsteps`` meter.

    ``source`` is held weakly: metrics never keep a processor alive.
    """
    ref = weakref.ref(source)
    meter = metrics.get_meter("otel_jobsteps", meter_provider=meter_provider)

    def observe(pick: Callable[[dict[str, Any]], Iterable[Observation]]) -> Any:
        def callback(_options: CallbackOptions) -> Iterable[Observation]:
            processor = ref()
            return [] if processor is None else list(pick(processor.stats()))

        return [callback]

    def plain(key: str) -> Callable[[dict[str, Any]], Iterable[Observation]]:
        return lambda stats: [Observation(stats.get(key, 0))]

    def by_kind(
        keep: Callable[[str], bool], strip: str = ""
    ) -> Callable[[dict[str, Any]], Iterable[Observation]]:
        return lambda stats: [
            Observation(value, {"kind": key.removeprefix(strip)})
            for key, value in stats.items()
            if keep(key) and isinstance(value, int)
        ]

    instruments = (
        ("otel_jobsteps.commands", plain("commands"), "{command}",
         "Span facts taken from the queue by the writer"),
        ("otel_jobsteps.operations.written", plain("operations_written"), "{operation}",
         "Row operations committed to PostgreSQL"),
        ("otel_jobsteps.retries", plain("retries"), "{retry}",
         "Batches kept for another try after a failed write"),
        ("otel_jobsteps.dropped", by_kind(lambda k: k.startswith(_DROPPED), _DROPPED),
         "{command}", "Work dropped, by kind (queue full, rejected by PostgreSQL)"),
        ("otel_jobsteps.problems",
         by_kind(lambda k: k in PROBLEM_KINDS or k.startswith("rejected_")),
         "{problem}", "Absorbed failures, by kind"),
    )  # fmt: skip
    for name, pick, unit, description in instruments:
        meter.create_observable_counter(name, observe(pick), unit=unit, description=description)
    meter.create_observable_gauge(
        "otel_jobsteps.queue.length",
        observe(plain("queued")),
        unit="{command}",
        description="Commands waiting for the writer",
    )
