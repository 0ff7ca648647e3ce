"""collect's metrics: one MeterProvider read by ``GET /metrics`` and, when
``OTEL_METRICS_EXPORTER`` names one, pushed by that exporter (``OTEL_EXPORTER_OTLP_*`` apply).

It holds the step metrics of what collect commits and collect's own: requests by outcome and
status code with their duration, spans and log records by outcome, and how long ago a settle
pass ended.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from importlib.metadata import entry_points
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    InMemoryMetricReader,
    MetricReader,
    PeriodicExportingMetricReader,
)
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import ConfigurationError
from ..metrics import StepMetrics
from ..prometheus import CONTENT_TYPE_LATEST, OpenTelemetryCollector, exposition
from ..stats import Stats

__all__ = ["CollectMetrics", "RequestMetricsMiddleware", "exporting_readers", "metric_exporters"]

_OUTCOMES = {200: "ok", 400: "bad_request", 408: "timeout", 413: "too_large",
             415: "unsupported_media_type", 429: "busy", 503: "unavailable"}  # fmt: skip
_SPAN_OUTCOMES = {"staged": "spans_staged", "duplicate": "spans_duplicate",
                  "late": "spans_late", "rejected": "rejected_spans"}  # fmt: skip
_LOG_OUTCOMES = {"staged": "logs_staged", "duplicate": "logs_duplicate",
                 "waiting": "logs_waiting", "rejected": "rejected_logs",
                 "outside": "logs_outside", "over_cap": "logs_over_cap",
                 "orphaned": "logs_orphaned"}  # fmt: skip
_REQUEST_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def metric_exporters(environ: Mapping[str, str] = os.environ) -> list[Any]:
    """The exporter (or reader) classes ``OTEL_METRICS_EXPORTER`` names, loaded from their
    entry points as the SDK's configuration does (``prometheus``: /metrics, already there).
    `ConfigurationError` for a name no installed package provides."""
    names = [n.strip() for n in environ.get("OTEL_METRICS_EXPORTER", "").split(",") if n.strip()]
    protocol = environ.get(
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    )
    found = []
    for name in names:
        if name in ("none", "prometheus"):
            continue
        if name == "otlp":
            name = "otlp_proto_grpc" if protocol == "grpc" else "otlp_proto_http"
        points = entry_points(group="opentelemetry_metrics_exporter", name=name)
        if not points:
            raise ConfigurationError(
                f"OTEL_METRICS_EXPORTER names {name!r}, which no installed package provides"
            )
        found.append(next(iter(points)).load())
    return found


def exporting_readers(environ: Mapping[str, str] = os.environ) -> list[MetricReader]:
    """A reader per exporter ``OTEL_METRICS_EXPORTER`` names; ``OTEL_EXPORTER_OTLP_*`` and
    ``OTEL_METRIC_EXPORT_INTERVAL`` are read by the exporter and the reader themselves."""
    return [
        exporter() if isinstance(exporter, type) and issubclass(exporter, MetricReader)
        else PeriodicExportingMetricReader(exporter())
        for exporter in metric_exporters(environ)
    ]  # fmt: skip


class CollectMetrics:
    """The receiver's MeterProvider and instruments over its counters (``stats``);
    ``settled_at``: when the last settle pass ended (monotonic clock)."""

    def __init__(
        self,
        stats: Stats,
        *,
        settled_at: Callable[[], float],
        readers: Iterable[MetricReader] = (),
    ) -> None:
        self._scrape = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self._scrape, *readers])
        self.steps = StepMetrics(
            self.provider, on_folded=partial(stats.add, "metrics_step_keys_folded")
        )
        meter = self.provider.get_meter("otel_jobsteps")
        self._requests = meter.create_counter(
            "otel_jobsteps.collect.requests",
            unit="{request}",
            description="OTLP export requests answered, by outcome and status code",
        )
        self._duration = meter.create_histogram(
            "otel_jobsteps.collect.request.duration",
            unit="s",
            description="Time to answer an OTLP export request",
            explicit_bucket_boundaries_advisory=_REQUEST_BUCKETS_S,
        )

        def outcomes(names: Mapping[str, str]) -> Callable[[CallbackOptions], list[Observation]]:
            def observe(_options: CallbackOptions) -> list[Observation]:
                counts = stats.snapshot()
                return [Observation(counts.get(key, 0), {"outcome": outcome})
                        for outcome, key in names.items()]  # fmt: skip

            return observe

        def settle_lag(_options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(time.monotonic() - settled_at())]

        meter.create_observable_counter(
            "otel_jobsteps.collect.spans",
            [outcomes(_SPAN_OUTCOMES)],
            unit="{span}",
            description="Received spans: staged, duplicate copies, late copies, rejected",
        )
        meter.create_observable_counter(
            "otel_jobsteps.collect.log_records",
            [outcomes(_LOG_OUTCOMES)],
            unit="{record}",
            description="Received log records: staged (of them waiting for their span),"
            " duplicate copies, rejected, outside any span, over a settled step's cap, dropped"
            " after waiting for their span",
        )
        meter.create_observable_gauge(
            "otel_jobsteps.collect.settle.lag",
            [settle_lag],
            unit="s",
            description="Seconds since the last settle pass ended",
        )

    def answered(self, status: int, seconds: float) -> None:
        attributes: dict[str, str | int] = {
            "outcome": _OUTCOMES.get(status, "error"),
            "http.response.status_code": status,
        }
        self._requests.add(1, attributes)
        self._duration.record(seconds, attributes)

    def route(self) -> Route:
        """``GET /metrics``: everything above in the Prometheus text format."""

        def metrics(_request: Request) -> Response:
            body = exposition([OpenTelemetryCollector(self._scrape)])
            return Response(body, media_type=CONTENT_TYPE_LATEST)

        return Route("/metrics", metrics, methods=["GET"])


class RequestMetricsMiddleware:
    """Counts and times every answer to an OTLP export (``POST /v1/...``)."""

    def __init__(self, app: ASGIApp, answered: Callable[[int, float], Any]) -> None:
        self.app, self._answered = app, answered

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # unless the app answers otherwise

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self._answered(status, time.perf_counter() - started)
