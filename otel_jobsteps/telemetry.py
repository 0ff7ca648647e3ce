"""The processor's own counters as OpenTelemetry metrics (no-ops without a MeterProvider)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

__all__ = ["register_metrics"]

_DROPPED = "dropped_"
_PROBLEMS = (
    "write_failed",
    "batch_rejected",
    "heartbeat_failed",
    "internal_error",
    "invalid_job_span",
    "shutdown_timeout",
)


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

    meter.create_observable_counter(
        "otel_jobsteps.commands",
        observe(plain("commands")),
        unit="{command}",
        description="Span facts taken from the queue by the writer",
    )
    meter.create_observable_counter(
        "otel_jobsteps.operations.written",
        observe(plain("operations_written")),
        unit="{operation}",
        description="Row operations committed to PostgreSQL",
    )
    meter.create_observable_counter(
        "otel_jobsteps.retries",
        observe(plain("retries")),
        unit="{retry}",
        description="Batches kept for another try after a failed write",
    )
    meter.create_observable_counter(
        "otel_jobsteps.dropped",
        observe(by_kind(lambda k: k.startswith(_DROPPED), _DROPPED)),
        unit="{command}",
        description="Work dropped, by kind (queue full, rejected by PostgreSQL)",
    )
    meter.create_observable_counter(
        "otel_jobsteps.problems",
        observe(by_kind(lambda k: k in _PROBLEMS or k.startswith("rejected_"))),
        unit="{problem}",
        description="Absorbed failures, by kind",
    )
    meter.create_observable_gauge(
        "otel_jobsteps.queue.length",
        observe(plain("queued")),
        unit="{command}",
        description="Commands waiting for the writer",
    )
