"""Fixtures of the web tests: the seed story and a hostile job recorded through real spans, and
an HTTP client on the app."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from otel_jobsteps import job_attempt, progress, record_job_event, step
from otel_jobsteps.web import create_app
from tests.conftest import TracingFactory
from tests.integration.test_query import record_two_attempts

HOSTILE = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
HOSTILE_ID = "evil/" + HOSTILE
TRACE_URL = "http://jaeger.example:16686/trace/{trace_id}?uiFind={span_id}&start={start_ms}"


def record_hostile(tracing: TracingFactory) -> str:
    """A job whose step key, progress detail, message and event carry HTML payloads."""
    tracer, processor = tracing()
    try:
        with job_attempt("evil", HOSTILE_ID, HOSTILE, 0, tracer=tracer):
            with step(HOSTILE, tracer=tracer):
                progress(note=HOSTILE)
                raise ValueError(HOSTILE)
    except ValueError:
        pass
    record_job_event("evil", HOSTILE_ID, HOSTILE, HOSTILE, tracer=tracer)
    assert processor.force_flush(10_000)
    return HOSTILE_ID


@pytest.fixture
def seeded(tracing: TracingFactory) -> str:
    """The seed story (render / 42: attempt 1 fails in SAVE, attempt 2 completes)."""
    return record_two_attempts(tracing)


@pytest.fixture
def hostile(tracing: TracingFactory) -> str:
    return record_hostile(tracing)


@pytest.fixture
def client(dsn: str) -> Iterator[TestClient]:
    with TestClient(create_app(dsn, trace_url=TRACE_URL)) as test_client:
        yield test_client
