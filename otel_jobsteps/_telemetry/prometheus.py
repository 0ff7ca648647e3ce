"""OpenTelemetry metrics in the Prometheus text format (``GET /metrics``), via prometheus_client.

A `MetricReader` hands the SDK's points to a prometheus_client collector at scrape time, named
as the OpenTelemetry-to-Prometheus rules say: dots to underscores, the unit as a suffix
(``s`` -> ``_seconds``, ``{...}`` dropped), ``_total`` on counters, attribute names the same way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from opentelemetry.sdk.metrics.export import (
    Gauge,
    Histogram,
    HistogramDataPoint,
    InMemoryMetricReader,
    Metric,
    Sum,
)
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.core import Metric as PrometheusMetric
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE_LATEST", "OpenTelemetryCollector", "exposition", "prometheus_name"]

_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_UNITS = {"s": "seconds", "ms": "milliseconds", "By": "bytes", "1": "ratio"}


def prometheus_name(name: str, unit: str = "") -> str:
    """The Prometheus name of an OpenTelemetry instrument (without ``_total``)."""
    base = _INVALID.sub("_", name)
    suffix = "" if unit.startswith("{") else _UNITS.get(unit, _INVALID.sub("_", unit))
    return f"{base}_{suffix}" if suffix and not base.endswith("_" + suffix) else base


def _label_names(points: Sequence[Any]) -> list[str]:
    """Every attribute any point has (a point without one says "")."""
    return sorted({key for point in points for key in point.attributes})


def _values(point: Any, attributes: Sequence[str]) -> list[str]:
    return [str(point.attributes.get(key, "")) for key in attributes]


def _family(metric: Metric) -> PrometheusMetric | None:
    data = metric.data
    points: Sequence[Any] = data.data_points
    attributes = _label_names(points)
    labels = [_INVALID.sub("_", key) for key in attributes]
    name = prometheus_name(metric.name, metric.unit or "")
    help_text = metric.description or metric.name
    if isinstance(data, Histogram):
        histogram = HistogramMetricFamily(name, help_text, labels=labels)
        for point in points:
            histogram.add_metric(_values(point, attributes), _buckets(point), point.sum)
        return histogram
    if isinstance(data, Sum) and data.is_monotonic:
        counter = CounterMetricFamily(name, help_text, labels=labels)
        for point in points:
            counter.add_metric(_values(point, attributes), point.value)
        return counter
    if isinstance(data, (Sum, Gauge)):
        gauge = GaugeMetricFamily(name, help_text, labels=labels)
        for point in points:
            gauge.add_metric(_values(point, attributes), point.value)
        return gauge
    return None  # exponential histograms: not configured here


def _buckets(point: HistogramDataPoint) -> list[tuple[str, float]]:
    """Cumulative bucket counts, ending in +Inf, as Prometheus wants them."""
    buckets, running = [], 0
    bounds = [*point.explicit_bounds, math.inf]
    for bound, count in zip(bounds, point.bucket_counts, strict=True):
        running += count
        buckets.append(("+Inf" if bound == math.inf else repr(float(bound)), float(running)))
    return buckets


class OpenTelemetryCollector(Collector):
    """A prometheus_client collector reading a MeterProvider's metrics through ``reader``
    (cumulative, as Prometheus counters are)."""

    def __init__(self, reader: InMemoryMetricReader) -> None:
        self._reader = reader

    def collect(self) -> Iterator[PrometheusMetric]:
        data = self._reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    family = _family(metric)
                    if family is not None:
                        yield family


def exposition(collectors: Iterable[Collector]) -> bytes:
    """The Prometheus text of ``collectors``, in one scrape."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry)
