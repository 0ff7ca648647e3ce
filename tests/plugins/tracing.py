"""Pytest plugin: tracer providers with a JobStepsProcessor on the test database."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer

from otel_jobsteps import JobStepsProcessor
from tests.helpers import TracingFactory, record_two_attempts


@pytest.fixture
def tracing(dsn: str) -> Iterator[TracingFactory]:
    """Build a TracerProvider with a JobStepsProcessor on the test database; shut down after."""
    providers: list[TracerProvider] = []

    def build(**options: Any) -> tuple[Tracer, JobStepsProcessor]:
        processor = JobStepsProcessor(options.pop("dsn", dsn), **options)
        provider = TracerProvider()
        provider.add_span_processor(processor)
        providers.append(provider)
        return provider.get_tracer("tests"), processor

    yield build
    for provider in providers:
        provider.shutdown()


@pytest.fixture
def two_attempts(tracing: TracingFactory) -> str:
    """The seed story recorded (render / 42: attempt 1 fails in SAVE, attempt 2 completes)."""
    return record_two_attempts(tracing)
