"""The setup warning stays quiet where spans go to ``collect`` by OTLP, and speaks otherwise
(the queue adapters' path: a provider handed over, no job span needed)."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
)

from otel_jobsteps import context
from otel_jobsteps._live.feeds import exports_by_otlp

CLOSED = "http://127.0.0.1:9/v1/traces"  # never exported to: no span is made here


@pytest.mark.parametrize(
    ("processor", "otlp"),
    [
        pytest.param(lambda: BatchSpanProcessor(OTLPSpanExporter(CLOSED)), True, id="batch-otlp"),
        pytest.param(lambda: SimpleSpanProcessor(OTLPSpanExporter(CLOSED)), True, id="simple-otlp"),
        pytest.param(lambda: BatchSpanProcessor(ConsoleSpanExporter()), False, id="console"),
    ],
)
def test_the_warning_is_quiet_only_when_spans_are_exported_by_otlp(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    processor: Callable[[], SpanProcessor],
    otlp: bool,
) -> None:
    monkeypatch.setattr(context, "_warned", set())  # the first occurrence, for this test
    provider = TracerProvider()
    provider.add_span_processor(processor())
    try:
        with caplog.at_level(logging.WARNING, logger="otel_jobsteps"):
            context.warn_missing_processor(provider)
    finally:
        provider.shutdown()

    assert exports_by_otlp(provider) is otlp
    said = [r.getMessage() for r in caplog.records if r.name == "otel_jobsteps"]
    assert (said == []) is otlp
    if not otlp:
        assert said[0].startswith("the tracer provider has no JobStepsProcessor")
