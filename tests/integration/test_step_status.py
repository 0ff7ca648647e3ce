"""Issue 37's step rules through the real processor and PostgreSQL: a skipped step is a row
ended SKIPPED (the step open stays open, the failing step is never it, the view, the CLI's
timeline and the metrics show it), and a step closed by a sibling's start whose own end then
fails is FAILED with its error, when the sibling's close was committed before that end."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.trace import Status, StatusCode

from otel_jobsteps import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID, JOB_STEP_KEY, JOB_TYPE, schema
from otel_jobsteps._cli.timeline import Style, render_detail
from otel_jobsteps._core.dialects.cicd import STEP_SKIPPED
from otel_jobsteps.query import job_detail
from tests.helpers import TracingFactory, rows

JOB = {JOB_DOMAIN: "ci", JOB_ID: "run-1", JOB_ATTEMPT: 1, JOB_TYPE: "pipeline"}


def _step_durations(reader: InMemoryMetricReader) -> dict[tuple[str, str], int]:
    """(step key, status) -> count of otel_jobsteps.step.duration."""
    found: dict[tuple[str, str], int] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != "otel_jobsteps.step.duration":
                    continue
                for point in metric.data.data_points:
                    attributes = point.attributes or {}
                    key = (str(attributes["job.step.key"]), str(attributes["job.step.status"]))
                    found[key] = found.get(key, 0) + point.count
    return found


def test_overlapping_and_skipped_steps(
    tracing: TracingFactory, conn: psycopg.Connection[Any], dsn: str
) -> None:
    reader = InMemoryMetricReader()
    tracer, processor = tracing(meter_provider=MeterProvider(metric_readers=[reader]))
    with tracer.start_as_current_span("pipeline", attributes=JOB) as job:
        context = trace.set_span_in_context(job)
        fetch = tracer.start_span("fetch", context=context, attributes={JOB_STEP_KEY: "FETCH"})
        assert processor.force_flush(10_000)
        build = tracer.start_span("build", context=context, attributes={JOB_STEP_KEY: "BUILD"})
        assert processor.force_flush(10_000)
        # BUILD's start closed FETCH, committed before FETCH's own end arrives.
        assert rows(conn, "SELECT step_status FROM job_event WHERE step_key = 'FETCH'") == [
            ("COMPLETED",)
        ]
        lint = tracer.start_span(
            "lint", context=context, attributes={JOB_STEP_KEY: "LINT", STEP_SKIPPED: True}
        )
        lint.end()
        build.end()
        fetch.record_exception(ConnectionError("mirror down"))
        fetch.set_status(Status(StatusCode.ERROR))
        fetch.end()
        job.set_status(Status(StatusCode.ERROR))
    assert processor.force_flush(10_000)

    steps = rows(
        conn,
        "SELECT step_key, step_status, message, ended_at IS NOT NULL FROM job_event"
        " WHERE type = 'STEP' ORDER BY created_at, id",
    )
    assert steps == [
        ("FETCH", "FAILED", "ConnectionError: mirror down", True),
        ("BUILD", "COMPLETED", None, True),
        ("LINT", "SKIPPED", None, True),
    ]
    # FETCH is dated at its own end, after BUILD's.
    assert rows(
        conn,
        "SELECT f.ended_at > b.ended_at FROM job_event f, job_event b"
        " WHERE f.step_key = 'FETCH' AND b.step_key = 'BUILD'",
    ) == [(True,)]
    # The failing step is the one that failed last, never the skipped one.
    assert rows(conn, "SELECT status, detail ->> 'step' FROM job_log") == [("FAILED", "FETCH")]
    assert rows(conn, "SELECT last_step FROM job_attempt") == [("FETCH",)]
    # Durations are of the steps that ran.
    assert rows(conn, "SELECT step_key, steps, failed FROM job_step_duration ORDER BY 1") == [
        ("BUILD", 1, 0),
        ("FETCH", 1, 1),
    ]

    detail = job_detail(dsn, "ci", "run-1")
    assert detail is not None
    shown = render_detail(detail, Style(color=False, unicode=False))
    assert "LINT   SKIPPED" in shown

    # Counted once each, as first committed: FETCH as COMPLETED (counters never go back).
    assert _step_durations(reader) == {
        ("FETCH", "COMPLETED"): 1,
        ("BUILD", "COMPLETED"): 1,
        ("LINT", "SKIPPED"): 1,
    }


def test_migration_0020_reaches_the_children_of_a_partitioned_install(
    empty_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Children made before 0020 copied the old check: a SKIPPED row moves into them after."""
    every = schema.migrations()
    monkeypatch.setattr(schema, "migrations", lambda: every[:19])
    schema.migrate(empty_dsn, partition_interval=timedelta(days=1))  # children made at 0019
    monkeypatch.undo()
    assert schema.migrate(empty_dsn)[0] == 20  # and the migrations after it
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        (child,) = conn.execute(
            "SELECT job_event FROM otel_jobsteps_partition ORDER BY lower_bound LIMIT 1"
        ).fetchone() or (None,)
        checks = rows(
            conn,
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conname = 'job_event_step_status_check' AND conrelid = %s::regclass",
            child,
        )
        assert len(checks) == 1
        assert "SKIPPED" in checks[0][0]
        conn.execute(
            "INSERT INTO " + child + " (id, domain, job_id, attempt, type, step_key, step_status,"
            " created_at, ended_at) SELECT 1, 'd', 'j', 1, 'STEP', 'LINT', 'SKIPPED',"
            " lower_bound, lower_bound FROM otel_jobsteps_partition WHERE job_event = %s",
            (child,),
        )
