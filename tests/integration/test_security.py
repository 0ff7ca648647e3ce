"""Least privilege, quoted identifiers, and passwords that never leak."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.trace import TracerProvider
from psycopg import sql
from psycopg.conninfo import make_conninfo

from otel_jobsteps import (
    DatabaseUnavailableError,
    JobStepsProcessor,
    job_attempt,
    migrate,
    progress,
    step,
)
from otel_jobsteps._pg.db import borrowed_connection, redact
from tests.helpers import rows, wait_until

PASSWORD = "s3cret-pw"


@pytest.fixture
def writer_role(dsn: str, server_dsn: str) -> Iterator[str]:
    """A role with only SELECT, INSERT, UPDATE on the two tables; yields its DSN."""
    role = f"jobsteps_writer_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(PASSWORD)
            )
        )
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("GRANT SELECT, INSERT, UPDATE ON job_event, job_log TO {}").format(
                sql.Identifier(role)
            )
        )
    yield make_conninfo(dsn, user=role, password=PASSWORD)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_the_writer_needs_only_select_insert_update(
    writer_role: str, conn: psycopg.Connection[Any]
) -> None:
    processor = JobStepsProcessor(writer_role, heartbeat_interval_s=0.05)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    for made in (0, 1):  # attempt 2 also exercises the abandon statement
        with job_attempt("render", "1", "t", made, tracer=tracer), step("RENDER", tracer=tracer):
            progress(pct=1)
            assert processor.force_flush(10_000)
    assert processor.force_flush(10_000)
    stats = processor.stats()
    provider.shutdown()
    assert "write_failed" not in stats, stats
    assert rows(conn, "SELECT attempt, step_status FROM job_event ORDER BY id") == [
        (1, "COMPLETED"),
        (2, "COMPLETED"),
    ]
    assert rows(conn, "SELECT attempt, status FROM job_log ORDER BY attempt") == [
        (1, "COMPLETED"),
        (2, "COMPLETED"),
    ]
    # ... and migrate is what needs more: the writer's role cannot change the schema.
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        migrate(writer_role, schema="elsewhere")


HOSTILE_SCHEMA = 'job"s; DROP TABLE public.job_event; --'


def test_the_writers_role_keeps_the_retry_tax_summary_without_a_right_on_it(
    writer_role: str, conn: psycopg.Connection[Any]
) -> None:
    """job_log's triggers write job_failed_step (0019) and job_retried_success (0022) as their
    owner (SECURITY DEFINER)."""
    processor = JobStepsProcessor(writer_role)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    with pytest.raises(OSError, match="disk full"):  # noqa: PT012 - step and job fail together
        with job_attempt("render", "1", "thumbnail", 0, tracer=tracer):
            with step("FETCH", tracer=tracer):
                pass
            with step("SAVE", tracer=tracer):
                raise OSError("disk full")
    with job_attempt("render", "1", "thumbnail", 1, tracer=tracer):  # retried to success
        with step("SAVE", tracer=tracer):
            pass
    assert processor.force_flush(10_000)
    stats = processor.stats()
    provider.shutdown()

    assert "write_failed" not in stats, stats
    assert rows(
        conn, "SELECT step_key, failed_attempts FROM job_failed_step ORDER BY step_key"
    ) == [("FETCH", 0), ("SAVE", 1)]
    assert rows(conn, "SELECT job_id, attempt FROM job_retried_success") == [("1", 2)]
    assert rows(
        conn,
        "SELECT step_key, failed_attempts, to_success_p50_seconds > 0 FROM job_retry_tax"
        " ORDER BY 1",
    ) == [("FETCH", 0, True), ("SAVE", 1, True)]


def test_a_hostile_schema_name_is_only_ever_an_identifier(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    assert migrate(dsn, schema=HOSTILE_SCHEMA) == [1, *_later_versions()]
    processor = JobStepsProcessor(dsn, schema=HOSTILE_SCHEMA)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    with job_attempt("render", "1", "t", tracer=tracer), step("RENDER", tracer=tracer):
        pass
    assert processor.force_flush(10_000)
    provider.shutdown()
    table = sql.Identifier(HOSTILE_SCHEMA, "job_event")
    assert conn.execute(sql.SQL("SELECT step_key FROM {}").format(table)).fetchall() == [
        ("RENDER",)
    ]
    assert rows(conn, "SELECT count(*) FROM public.job_event") == [(0,)]  # still there


def _later_versions() -> list[int]:
    from otel_jobsteps.sql import migrations

    return [version for version, _, _ in migrations()][1:]


def test_passwords_never_leak(caplog: pytest.LogCaptureFixture) -> None:
    dsn = f"postgresql://someone:{PASSWORD}@127.0.0.1:1/db?connect_timeout=1"
    assert PASSWORD not in redact(dsn)
    with pytest.raises(DatabaseUnavailableError) as error, borrowed_connection(dsn):
        pass
    assert PASSWORD not in str(error.value)
    assert error.value.__cause__ is None  # the driver's message is not chained either
    caplog.set_level(logging.DEBUG)
    processor = JobStepsProcessor(dsn, shutdown_timeout_ms=500)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    with job_attempt("render", "1", "t", tracer=provider.get_tracer("t")):
        pass
    assert not processor.force_flush(300)
    # However long the refused attempt takes on a loaded machine: it is counted once it failed.
    wait_until(lambda: processor.stats().get("write_failed"), what="a refused connection")
    stats = processor.stats()
    provider.shutdown()
    assert PASSWORD not in repr(stats)
    assert PASSWORD not in caplog.text
