"""The public in-memory store keeps the rows PostgreSQL keeps, for the same spans."""

from __future__ import annotations

from typing import Any

import psycopg
from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JobStepsProcessor
from otel_jobsteps._cli.demo import record_seed_story
from otel_jobsteps.testing import InMemoryStore
from tests.helpers import TracingFactory, rows

STEP_COLUMNS = "attempt, step_key, step_status, detail, message"
LOG_COLUMNS = "attempt, status, reason, detail"


def _tell(processor: JobStepsProcessor, job_id: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(processor)
    try:
        record_seed_story(provider.get_tracer("tests"), job_id)
        assert processor.force_flush(10_000)
    finally:
        provider.shutdown()


def test_the_seed_story_reads_the_same_in_memory_and_in_postgresql(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    _, processor = tracing()
    _tell(processor, "7")
    store = InMemoryStore()
    _tell(JobStepsProcessor(store=store), "7")

    in_database = rows(
        conn, f"SELECT {STEP_COLUMNS} FROM job_event WHERE type = 'STEP' ORDER BY id"
    )
    in_memory = [(r.attempt, r.step_key, r.step_status, r.detail, r.message) for r in store.steps()]
    assert in_memory == in_database
    assert in_database[1][1:3] == ("SAVE", "FAILED")  # the story as told

    logs = rows(conn, f"SELECT {LOG_COLUMNS} FROM job_log ORDER BY attempt")
    assert [(r.attempt, r.status, r.reason, r.detail) for r in store.job_logs()] == logs
    assert [log[1] for log in logs] == ["FAILED", "COMPLETED"]
    events = [(r.type, r.message) for r in store.events() if r.type != "STEP"]
    assert events == rows(conn, "SELECT type, message FROM job_event WHERE type <> 'STEP'")
