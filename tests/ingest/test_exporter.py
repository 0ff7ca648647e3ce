"""Real OTLP clients against a running ``collect``: the rows equal the processor's."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_jobsteps import JobStepsProcessor
from tests.ingest.collector import CollectorFactory, table_rows
from tests.ingest.stories import tell_all


@pytest.mark.parametrize(
    "compression", [Compression.NoCompression, Compression.Gzip], ids=["plain", "gzip"]
)
def test_exported_story_gives_the_processors_rows(
    start_collect: CollectorFactory, dsn: str, second_dsn: str, compression: Compression
) -> None:
    collector = start_collect(second_dsn)
    processor = JobStepsProcessor(dsn)
    exporter = OTLPSpanExporter(endpoint=collector.traces_url, compression=compression)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    # Small batches: the spans of one trace arrive split over several requests.
    provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=3))
    tell_all(provider.get_tracer("tests"))
    assert provider.force_flush(30_000)
    provider.shutdown()

    live_events, live_logs = table_rows(dsn)
    received_events, received_logs = table_rows(second_dsn)
    assert (len(live_events), len(live_logs)) == (9, 4)  # the stories' rows, all there
    assert received_events == live_events
    assert received_logs == live_logs
