"""collect's metrics: one MeterProvider read by ``GET /metrics`` and, when
``OTEL_METRICS_EXPORTER`` names one, pushed by that exporter (``OTEL_EXPORTER_OTLP_*`` apply).

It holds the step metrics of what collect commits and collect's own: requests by outcome and
status code with their duration (gRPC calls too: their HTTP-equivalent status, with
``rpc.system`` ``grpc``), spans and log records by outcome, and how long ago a settle pass
ended.

With ``--workers N`` a scrape reaches one worker process: each worker publishes its numbers
every second to a directory of the run (`shared_across_workers`), and ``GET /metrics`` of any
worker answers the sum of every worker's counters and histograms (the workers gone included:
counters never go back) and, of gauges, the least value among the live workers.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    InMemoryMetricReader,
    MetricReader,
    PeriodicExportingMetricReader,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.core import Metric as PrometheusMetric
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._http.requestlog import Answered
from .._telemetry.counters import PROBLEM_KINDS
from .._telemetry.metrics import StepMetrics
from .._telemetry.prometheus import CONTENT_TYPE_LATEST, OpenTelemetryCollector, exposition
from .._telemetry.stats import Stats
from ..errors import ConfigurationError

__all__ = [
    "WORKERS_DIR_ENV",
    "CollectMetrics",
    "RequestMetricsMiddleware",
    "exporting_readers",
    "metric_exporters",
    "shared_across_workers",
]

# The directory of one run where its worker processes publish their numbers (--workers N > 1).
WORKERS_DIR_ENV = "OTEL_JOBSTEPS_COLLECT_METRICS_DIR"
PUBLISH_EVERY_S = 1.0  # how old another worker's numbers in a scrape can be

_OUTCOMES = {200: "ok", 400: "bad_request", 408: "timeout", 413: "too_large",
             415: "unsupported_media_type", 429: "busy", 503: "unavailable"}  # fmt: skip
_SPAN_OUTCOMES = {"staged": "spans_staged", "duplicate": "spans_duplicate",
                  "late": "spans_late", "rejected": "rejected_spans"}  # fmt: skip
_LOG_OUTCOMES = {"staged": "logs_staged", "duplicate": "logs_duplicate",
                 "waiting": "logs_waiting", "rejected": "rejected_logs",
                 "outside": "logs_outside", "over_cap": "logs_over_cap",
                 "orphaned": "logs_orphaned"}  # fmt: skip
# Statements that failed for one request (failures.py): answered 503 retryable, or its spans
# (records) that kept failing refused; and the pauses for a database that is away.
_FAILURE_OUTCOMES = {"retry": "statement_retry_answers", "refused": "statement_refusals",
                     "paused": "database_pauses"}  # fmt: skip
_REQUEST_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def metric_exporters(environ: Mapping[str, str] = os.environ) -> list[Any]:
    """The exporter classes ``OTEL_METRICS_EXPORTER`` names, from their entry points as the
    SDK loads them (``prometheus``: /metrics); `ConfigurationError` for an unknown name."""
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
            self.provider,
            on_folded=partial(stats.add, "metrics_step_keys_folded"),
            on_folded_values=partial(stats.add, "metrics_values_folded"),
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
        meter.create_observable_counter(
            "otel_jobsteps.collect.statement_failures",
            [outcomes(_FAILURE_OUTCOMES)],
            unit="{failure}",
            description="Requests whose statements failed: answered 503 to retry (this request"
            " only), parts refused after failing every time, pauses for a database away",
        )

        def problems(_options: CallbackOptions) -> list[Observation]:
            counts = stats.snapshot()
            return [Observation(counts[kind], {"kind": kind})
                    for kind in PROBLEM_KINDS if counts.get(kind)]  # fmt: skip

        meter.create_observable_counter(
            "otel_jobsteps.problems",
            [problems],
            unit="{problem}",
            description="Absorbed failures, by kind, as the processor reports them (a job span"
            " ignored, job attributes changed after they were read, ...)",
        )
        meter.create_observable_gauge(
            "otel_jobsteps.collect.settle.lag",
            [settle_lag],
            unit="s",
            description="Seconds since the last settle pass ended",
        )

    def answered(self, status: int, seconds: float, **more: str) -> None:
        attributes: dict[str, str | int] = {
            "outcome": _OUTCOMES.get(status, "error"),
            "http.response.status_code": status,
            **more,
        }
        self._requests.add(1, attributes)
        self._duration.record(seconds, attributes)

    def answered_call(self, answered: Answered) -> None:
        """A gRPC call, by the HTTP status OTLP/HTTP answers for its outcome (one alert for
        both), told apart by ``rpc.system``."""
        self.answered(answered.status, answered.seconds, **{"rpc.system": answered.protocol})

    def route(self) -> Route:
        """``GET /metrics``: everything above in the Prometheus text format (with several
        workers: every worker's, see `share`)."""
        own = OpenTelemetryCollector(self._scrape)

        def metrics(_request: Request) -> Response:
            directory = os.environ.get(WORKERS_DIR_ENV)
            collector = own if directory is None else _AllWorkers(Path(directory), own)
            return Response(exposition([collector]), media_type=CONTENT_TYPE_LATEST)

        return Route("/metrics", metrics, methods=["GET"])

    def share(self, app: Starlette) -> None:
        """With several workers (`WORKERS_DIR_ENV` set): publish this worker's numbers every
        `PUBLISH_EVERY_S` while ``app`` runs, and once more when it stops."""
        directory = os.environ.get(WORKERS_DIR_ENV)
        if directory is None:
            return
        publisher = _Publisher(Path(directory), OpenTelemetryCollector(self._scrape))
        inner = app.router.lifespan_context

        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[Any]:
            async with inner(app) as state:
                publisher.start()
                try:
                    yield state
                finally:
                    publisher.stop()

        app.router.lifespan_context = lifespan


def _families(collector: Collector) -> list[dict[str, Any]]:
    """A collector's families as JSON: name, help, type and samples (name, labels, value)."""
    return [
        {
            "name": family.name,
            "help": family.documentation,
            "type": family.type,
            "samples": [[sample.name, sample.labels, sample.value] for sample in family.samples],
        }
        for family in collector.collect()
    ]


class _Publisher:
    """Writes this worker's families to ``worker-PID.json`` of the run's directory, atomically,
    every `PUBLISH_EVERY_S` (a daemon thread) and once more at `stop`."""

    def __init__(self, directory: Path, collector: Collector) -> None:
        self._path = directory / f"worker-{os.getpid()}.json"
        self._collector = collector
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="otel_jobsteps-metrics-publisher", daemon=True
        )

    def start(self) -> None:
        self.publish()
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(5.0)
        self.publish()

    def _run(self) -> None:
        while not self._stopped.wait(PUBLISH_EVERY_S):  # a period, not a wait for an event
            self.publish()

    def publish(self) -> None:
        snapshot = {"pid": os.getpid(), "families": _families(self._collector)}
        partial_path = self._path.with_suffix(".partial")
        partial_path.write_text(json.dumps(snapshot), "utf-8")
        os.replace(partial_path, self._path)  # a reader sees the old file or the new one


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process has that number now
        return False
    return True


class _AllWorkers(Collector):
    """Every worker's families merged: this worker's as of now, the others' as published."""

    def __init__(self, directory: Path, own: Collector) -> None:
        self._directory, self._own = directory, own

    def _snapshots(self) -> list[tuple[bool, list[dict[str, Any]]]]:
        """(alive, families) of each worker, this one first."""
        found = [(True, _families(self._own))]
        for path in sorted(self._directory.glob("worker-*.json")):
            try:
                snapshot = json.loads(path.read_text("utf-8"))
            except (OSError, ValueError):  # a worker being replaced: its next file will do
                continue
            if snapshot["pid"] != os.getpid():
                found.append((_alive(snapshot["pid"]), snapshot["families"]))
        return found

    def collect(self) -> Iterator[PrometheusMetric]:
        merged: dict[str, PrometheusMetric] = {}
        values: dict[tuple[str, str, tuple[tuple[str, str], ...]], float] = {}
        snapshots = self._snapshots()
        for alive, families in snapshots:
            for family in families:
                kind = family["type"]
                if kind == "gauge" and not alive:
                    continue  # a gauge of a worker gone says nothing now
                if family["name"] not in merged:
                    merged[family["name"]] = PrometheusMetric(family["name"], family["help"], kind)
                for name, labels, value in family["samples"]:
                    key = (family["name"], name, tuple(sorted(labels.items())))
                    if key not in values:
                        values[key] = value
                    elif kind == "gauge":
                        values[key] = min(values[key], value)
                    else:  # counters and histograms (cumulative buckets, sum, count) add up
                        values[key] += value
        for (family_name, name, labels), value in values.items():
            merged[family_name].add_sample(name, dict(labels), value)
        workers = GaugeMetricFamily(
            "otel_jobsteps_collect_workers", "Live collect worker processes in this scrape"
        )
        workers.add_metric([], sum(alive for alive, _ in snapshots))
        yield from merged.values()
        yield workers


@contextmanager
def shared_across_workers(workers: int) -> Iterator[None]:
    """With ``workers`` > 1: a directory for this run where each worker publishes its numbers
    (named in `WORKERS_DIR_ENV` for them), removed when the run ends."""
    if workers <= 1:
        yield
        return
    directory = tempfile.mkdtemp(prefix="otel_jobsteps-collect-metrics-")
    os.environ[WORKERS_DIR_ENV] = directory
    try:
        yield
    finally:
        os.environ.pop(WORKERS_DIR_ENV, None)
        shutil.rmtree(directory, ignore_errors=True)


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
