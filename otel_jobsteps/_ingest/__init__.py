"""``otel-jobsteps collect``: the second door in. OTLP/HTTP and OTLP/gRPC spans from any
language's exporter or an OpenTelemetry Collector become the same rows `JobStepsProcessor`
writes.

server (start) -> listener (app: HTTP, grpc_service: gRPC) -> intake (one budget) -> decode
(protobuf / JSON -> facts) -> staging (pool, one transaction a request) -> request (place,
stage; records: log records) -> derive (pure: order, mapping) -> translate (shared with the
processor) -> recorder -> store.
"""

from __future__ import annotations

from .mapping import JobMapping
from .server import app_from_environment, serve_collect
from .settings import CollectSettings

__all__ = ["CollectSettings", "JobMapping", "app_from_environment", "serve_collect"]
