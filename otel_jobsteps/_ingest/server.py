"""Starting ``otel-jobsteps collect``: settings checked, the database checked, then uvicorn
with one app per worker process (built from the settings left in the environment).
"""

from __future__ import annotations

import dataclasses
import gc
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .._core.dialects import select_dialects
from .._core.translate import logs_settings
from .._http.listen import check_free, parse_listen
from ..errors import ConfigurationError
from .mapping import JobMapping
from .settings import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_MAX_BODY_BYTES,
    SHUTDOWN_GRACE_S,
    CollectSettings,
)

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["SETTINGS_ENV", "app_from_environment", "serve_collect"]

# How uvicorn's worker processes receive the receiver's settings (they import the app anew).
SETTINGS_ENV = "OTEL_JOBSTEPS_COLLECT_SETTINGS"


def app_from_environment() -> Starlette:
    """The receiver's ASGI app, built from the settings `serve_collect` left in the environment
    (uvicorn's factory for each worker process)."""
    from .._http.loopback import LoopbackHostMiddleware, loopback_hosts
    from .._telemetry.stats import Stats
    from .app import create_app
    from .metrics import CollectMetrics, RequestMetricsMiddleware, exporting_readers
    from .staging import Staging

    settings = CollectSettings.from_json(os.environ[SETTINGS_ENV])
    stats = Stats()
    metrics = CollectMetrics(
        stats, settled_at=lambda: staging.settled_at, readers=exporting_readers()
    )
    staging = Staging(settings, stats=stats, on_committed=metrics.steps.record)
    app = create_app(
        staging,
        max_body_bytes=settings.max_body_bytes,
        max_in_flight=4 * settings.connections,
        retry_after_s=settings.retry_after_s,
        settle_every_s=min(60.0, max(1.0, settings.settle_after_s / 4)),
        body_timeout_s=settings.body_timeout_s,
        grpc_listen=settings.grpc_listen,
        access_log=settings.access_log,
    )
    app.router.routes.append(metrics.route())
    app.add_middleware(RequestMetricsMiddleware, answered=metrics.answered)
    app.state.intake.listen(metrics.answered_call)  # gRPC calls, counted alike
    metrics.share(app)  # --workers N: every worker's numbers in each scrape
    if settings.loopback_host is not None:  # outermost: metrics and health are refused too
        app.add_middleware(LoopbackHostMiddleware, hosts=loopback_hosts(settings.loopback_host))
    _tune_collector()
    return app


# A request makes ~10 short-lived objects per span, few in cycles: at Python's default 700 the
# cyclic collector ran ~15 times per 1,000-span request (measured in docs/ingest.md). A
# 1,000-span request holds over 20,000 at its peak, freed by reference counting when it ends
# (its derivation makes no cycles): below 100,000, one collection of them every few requests.
_YOUNG_OBJECTS_PER_COLLECTION = 100_000


def _tune_collector() -> None:
    """This worker's garbage collector: what importing and building the app made is kept out
    of every collection (it lives as long as the process), and the youngest generation is
    collected less often."""
    gc.collect()
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(_YOUNG_OBJECTS_PER_COLLECTION, middle, oldest)


def serve_collect(
    dsn: str,
    *,
    listen: str = "127.0.0.1:4318",
    grpc_listen: str = "127.0.0.1:4317",
    schema: str = "public",
    settle_after_s: float = 600.0,
    settle_open_after_s: float = 86_400.0,
    mappings: Sequence[JobMapping] = (),
    dialects: str | Sequence[str] | None = None,
    max_body_bytes: int | None = None,
    retry_after_s: int = 2,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    connections: int = 4,
    workers: int = 1,
    access_log: bool = False,
    logs_min_severity: str | int | None = None,
    logs_max_per_step: int | None = None,
    announce: Callable[[str], None] = lambda line: None,
) -> None:
    """Run the receiver until SIGTERM or SIGINT: then stop accepting, finish the requests in
    flight (their spans are committed before they are answered) and return.

    ``dialects``: the other instrumentations read as jobs (`_core.dialects`; a comma list,
    ``all`` or ``none``), default ``OTEL_JOBSTEPS_DIALECTS``, else the default set.
    ``workers`` processes share the ports (they lock per trace, as separate receivers do);
    ``grpc_listen`` ``off``: no gRPC listener. ``logs_min_severity`` (a name or 0..24) and
    ``logs_max_per_step`` default to ``OTEL_JOBSTEPS_LOGS_MIN_SEVERITY`` and
    ``OTEL_JOBSTEPS_LOGS_MAX_PER_STEP``, as the processor's.
    """
    from .._http.loopback import is_loopback
    from .grpc_service import grpc_target
    from .metrics import metric_exporters

    host, port = parse_listen(listen, example="127.0.0.1:4318")
    check_free(host, port)
    grpc_bind = _grpc_bind(grpc_listen, port)
    logs_min, logs_max = logs_settings(logs_min_severity, logs_max_per_step, environ=os.environ)
    settings = CollectSettings(
        dsn,
        schema=schema,
        connections=connections,
        settle_after_s=settle_after_s,
        settle_open_after_s=settle_open_after_s,
        mappings=tuple(mappings),
        dialects=select_dialects(
            os.environ.get("OTEL_JOBSTEPS_DIALECTS") if dialects is None else dialects
        ).names,
        max_body_bytes=max_body_bytes or DEFAULT_MAX_BODY_BYTES,
        retry_after_s=retry_after_s,
        body_timeout_s=body_timeout_s,
        grpc_listen=grpc_target(*grpc_bind) if grpc_bind else None,
        access_log=access_log,
        logs_min_severity=logs_min,
        logs_max_per_step=logs_max,
        loopback_host=host if is_loopback(host) else None,  # DNS rebinding, as serve
    )
    metric_exporters()  # a wrong OTEL_METRICS_EXPORTER is an error here, not in each worker
    _check_database(settings)
    os.environ[SETTINGS_ENV] = settings.to_json()
    announce(_started_line(settings, listen, grpc_listen if grpc_bind else None))
    _run(host, port, workers)


def _started_line(settings: CollectSettings, listen: str, grpc_listen: str | None) -> str:
    from .._http.health import COLLECT_RIGHTS, Readiness
    from .._pg.db import redact

    grpc_line = f", gRPC {grpc_listen}" if grpc_listen else ""
    schema = settings.schema
    layout = Readiness(settings.dsn, schema=schema, rights=COLLECT_RIGHTS).layout()
    return (
        f"collect: http://{listen}/v1/traces and /v1/logs{grpc_line} -> {redact(settings.dsn)}"
        f" (schema {schema}, layout {layout})"
    )


def _grpc_bind(grpc_listen: str, http_port: int) -> tuple[str, int] | None:
    """Where gRPC listens (None: ``off``), checked free and apart from HTTP's port."""
    if grpc_listen == "off":
        return None
    bind = parse_listen(grpc_listen, option="--grpc-listen", example="127.0.0.1:4317")
    if bind[1] == http_port:
        raise ConfigurationError("--grpc-listen and --listen need two ports")
    check_free(*bind, option="--grpc-listen")
    return bind


def _check_database(settings: CollectSettings) -> None:
    """The tables and rights, on one connection, before any worker starts."""
    from .staging import Staging

    checker = Staging(dataclasses.replace(settings, connections=1))
    try:
        checker.check()
    finally:
        checker.close()


def _run(host: str, port: int, workers: int) -> None:
    """uvicorn until SIGTERM or SIGINT, one app per worker process."""
    import uvicorn

    from .metrics import shared_across_workers

    with shared_across_workers(workers):
        uvicorn.run(
            f"{__name__}:app_from_environment",
            factory=True,
            workers=workers,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
            server_header=False,
            loop="asyncio",  # grpc.aio runs in the app's loop: the standard one, not uvloop
        )
