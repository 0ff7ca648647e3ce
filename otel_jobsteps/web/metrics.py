"""``GET /metrics`` of ``serve``: gauges read from the tables at scrape time (Prometheus text).

Every gauge goes through `gauge_families`: rows whose labels read the same (a job type NULL and
``""`` both say ``job_type=""``) become one sample, and beyond ``max_series`` label sets the
smallest are folded into one `OTHER_STEP_KEY` series (collect's bound and fold value), counted
in ``otel_jobsteps_folded_series``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import timedelta

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.core import Metric as PrometheusMetric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

from .._telemetry.metrics import OTHER_STEP_KEY, max_series_from_environment
from .._telemetry.prometheus import CONTENT_TYPE_LATEST, exposition
from .data import Reader
from .overdue import BASELINE_WINDOW, MIN_SAMPLES, Baselines

__all__ = ["DEFAULT_SILENT_AFTER", "gauge_families", "metrics_page"]

DEFAULT_SILENT_AFTER = timedelta(minutes=5)
_LABELS = ("job_domain", "job_type", "job_step_key")

# A row of gauges: its label values (None reads as ""), then one value per gauge.
Labels = tuple[str | None, ...]


def gauge_families(
    gauges: Sequence[tuple[str, str]],
    label_names: Sequence[str],
    rows: Iterable[tuple[Labels, Sequence[float]]],
    max_series: int,
) -> tuple[list[GaugeMetricFamily], int]:
    """One family per (name, help) of ``gauges``, with a sample per distinct label set of
    ``rows`` (the values of rows that read the same are added up): at most ``max_series`` of
    them, the label sets with the smallest first value beyond that added up into one series
    labelled `OTHER_STEP_KEY`. Returns the families and how many label sets were folded."""
    merged: dict[tuple[str, ...], list[float]] = {}
    for labels, values in rows:
        _add(merged, tuple(value or "" for value in labels), values)
    folded = 0
    if len(merged) > max_series:
        # The largest kept (by the first gauge, then by labels: the same rows fold alike).
        ranked = sorted(merged.items(), key=lambda item: (-item[1][0], item[0]))
        other = tuple(OTHER_STEP_KEY for _ in label_names)
        # One place for the folded series, unless a kept label set is already that one.
        keep = max_series if other in dict(ranked[:max_series]) else max_series - 1
        merged = dict(ranked[:keep])
        for _, values in ranked[keep:]:
            _add(merged, other, values)
        folded = len(ranked) - keep
    families = [GaugeMetricFamily(name, text, labels=label_names) for name, text in gauges]
    for labels, values in merged.items():
        for family, value in zip(families, values, strict=True):
            family.add_metric(labels, value)
    return families, folded


def _add(
    merged: dict[tuple[str, ...], list[float]], labels: tuple[str, ...], values: Sequence[float]
) -> None:
    found = merged.get(labels)
    if found is None:
        merged[labels] = list(values)
    else:
        for index, value in enumerate(values):
            found[index] += value


class _OpenSteps(Collector):
    """Open steps, those silent for ``silent_after`` and those overdue by ``baselines``, by
    domain, job type and step."""

    def __init__(
        self, reader: Reader, silent_after: timedelta, max_series: int, baselines: Baselines
    ) -> None:
        self._reader, self._silent_after, self._max_series = reader, silent_after, max_series
        self._baselines = baselines

    def collect(self) -> Iterator[PrometheusMetric]:
        silent_help = (
            f"Open steps with no sign of life for {self._silent_after.total_seconds():g} s"
        )
        overdue_help = (
            f"Open steps running longer than {self._baselines.factor:g} x their p99 of the last "
            f"{BASELINE_WINDOW.days} days (of at least {MIN_SAMPLES} completed)"
        )
        found = self._reader.open_step_gauges(self._silent_after, self._baselines.limits())
        rows = (((domain, job_type, key), counts) for domain, job_type, key, *counts in found)
        families, folded = gauge_families(
            [
                ("otel_jobsteps_open_steps", "Steps running now"),
                ("otel_jobsteps_silent_steps", silent_help),
                ("otel_jobsteps_overdue_steps", overdue_help),
            ],
            _LABELS,
            rows,
            self._max_series,
        )
        yield from families
        folded_help = (
            f"Label sets of this scrape's gauges added up into their {OTHER_STEP_KEY} series "
            "(beyond --metrics-max-series)"
        )
        counted, _ = gauge_families(
            [("otel_jobsteps_folded_series", folded_help)], (), [((), (folded,))], 1
        )
        yield from counted


def metrics_page(
    reader: Reader,
    silent_after: timedelta,
    baselines: Baselines,
    max_series: int | None = None,
    more: Sequence[Collector] = (),
) -> Callable[[Request], Response]:
    """The scrape's endpoint: one read of the open steps, as Prometheus text; ``max_series``
    label sets per gauge at most (else `MAX_SERIES_ENV`, else the default); ``more``
    collectors after them (the operator actions' counter)."""
    bound = max_series_from_environment(max_series)
    collector = _OpenSteps(reader, silent_after, bound, baselines)

    def metrics(_request: Request) -> Response:
        return Response(exposition([collector, *more]), media_type=CONTENT_TYPE_LATEST)

    return metrics
