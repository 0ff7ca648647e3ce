"""``GET /metrics`` of ``serve``: gauges read from the tables at scrape time (Prometheus text)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.core import Metric as PrometheusMetric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

from .._prometheus import CONTENT_TYPE_LATEST, exposition
from .data import Reader

__all__ = ["DEFAULT_SILENT_AFTER", "metrics_page"]

DEFAULT_SILENT_AFTER = timedelta(minutes=5)
_LABELS = ["job_domain", "job_type", "job_step_key"]


class _OpenSteps(Collector):
    """Open steps, and those silent for ``silent_after``, by domain, job type and step."""

    def __init__(self, reader: Reader, silent_after: timedelta) -> None:
        self._reader, self._silent_after = reader, silent_after

    def collect(self) -> Iterator[PrometheusMetric]:
        found = self._reader.open_step_gauges(self._silent_after)
        open_steps = GaugeMetricFamily(
            "otel_jobsteps_open_steps", "Steps running now", labels=_LABELS
        )
        silent = GaugeMetricFamily(
            "otel_jobsteps_silent_steps",
            f"Open steps with no sign of life for {self._silent_after.total_seconds():g} s",
            labels=_LABELS,
        )
        for domain, job_type, step_key, count, silent_count in found:
            labels = [domain, job_type or "", step_key or ""]
            open_steps.add_metric(labels, count)
            silent.add_metric(labels, silent_count)
        yield open_steps
        yield silent


def metrics_page(reader: Reader, silent_after: timedelta) -> Callable[[Request], Response]:
    """The scrape's endpoint: one read of the open steps, as Prometheus text."""
    collector = _OpenSteps(reader, silent_after)

    def metrics(_request: Request) -> Response:
        return Response(exposition([collector]), media_type=CONTENT_TYPE_LATEST)

    return metrics
