"""The database going away under a running ``collect`` and coming back, as the durability tests
of both listeners stage it (through the fault proxy)."""

from __future__ import annotations

import threading

from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from otel_jobsteps import JobStepsProcessor
from tests.faults.proxy import FaultProxy, Mode
from tests.helpers import wait_until
from tests.ingest.stories import Recording, seed_story, tell_all


def database_away(proxy: FaultProxy, dsn: str, suffix: str) -> list[Span]:
    """Every connection through ``proxy`` refused from now on; the seed story's spans (its rows
    recorded into ``dsn``) to send meanwhile."""
    proxy.set_mode(Mode.REFUSE)
    proxy.cut()
    recording = Recording(dsn)
    try:
        return recording.spans(seed_story, suffix)
    finally:
        recording.close()


def export_through_recovery(
    proxy: FaultProxy, exporter: SpanExporter, dsn: str, suffix: str
) -> None:
    """Every story told to the processor (writing ``dsn``) and to ``exporter`` while the
    database is away; it comes back once collect has tried it twice more; all flushed."""
    provider = TracerProvider()
    provider.add_span_processor(JobStepsProcessor(dsn))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tell_all(provider.get_tracer("tests"), suffix)
    flushed: list[bool] = []
    flusher = threading.Thread(target=lambda: flushed.append(provider.force_flush(60_000)))
    tried = proxy.accepted
    flusher.start()
    # The receiver keeps trying the database while the exporter retries; then it is back.
    wait_until(lambda: proxy.accepted >= tried + 2, what="collect to try the database again")
    proxy.set_mode(Mode.PASS)
    flusher.join()
    provider.shutdown()
    assert flushed == [True]
