"""``otel-jobsteps collect``: the second door in. OTLP/HTTP spans from any language's exporter
or an OpenTelemetry Collector become the same rows `JobStepsProcessor` writes.

decode (protobuf / JSON -> span facts) -> staging (durable, per trace) -> derive (mapping, span
order) -> translate (shared with the processor) -> recorder -> store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .mapping import JobMapping

__all__ = ["JobMapping", "serve_collect"]


def serve_collect(
    dsn: str,
    *,
    listen: str = "127.0.0.1:4318",
    schema: str = "public",
    settle_after_s: float = 600.0,
    mappings: Sequence[JobMapping] = (),
    max_body_bytes: int | None = None,
    retry_after_s: int = 2,
    connections: int = 4,
    announce: Callable[[str], None] = lambda line: None,
) -> None:
    """Run the receiver until SIGTERM or SIGINT: then stop accepting, finish the requests in
    flight (their spans are committed before they are answered) and return."""
    import uvicorn

    from ..db import redact
    from ..web.app import parse_listen
    from .app import DEFAULT_MAX_BODY_BYTES, create_app
    from .staging import Staging

    host, port = parse_listen(listen)
    staging = Staging(
        dsn,
        schema=schema,
        connections=connections,
        settle_after_s=settle_after_s,
        mappings=mappings,
    )
    staging.check()
    app = create_app(
        staging,
        max_body_bytes=max_body_bytes or DEFAULT_MAX_BODY_BYTES,
        max_in_flight=4 * connections,
        retry_after_s=retry_after_s,
        settle_every_s=min(60.0, max(1.0, settle_after_s / 4)),
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=30,
        server_header=False,
    )
    server = uvicorn.Server(config)
    announce(f"collect: http://{listen}/v1/traces -> {redact(dsn)} (schema {schema})")
    server.run()
