"""Pytest plugin: the test database. OTEL_JOBSTEPS_TEST_DSN, else testcontainers, else the
embedded server; one migrated template database per session, one clone of it per test.
OTEL_JOBSTEPS_TEST_LAYOUT=partitioned migrates it with the partitioned layout (interval 1d).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer

from otel_jobsteps import JobStepsProcessor, migrate
from tests.helpers import (
    PARTITION_INTERVAL,
    TracingFactory,
    create_database,
    database_dsn,
    drop_database,
    record_two_attempts,
)


def _docker_answers() -> bool:
    if not os.environ.get("DOCKER_HOST") and not os.path.exists("/var/run/docker.sock"):
        return False
    try:
        import docker  # type: ignore[import-untyped]

        client = docker.from_env(timeout=2)
        try:
            client.ping()
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - no engine, no client library, no socket: all "no"
        return False
    return True


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    """DSN of a maintenance database on the server the tests use."""
    configured = os.environ.get("OTEL_JOBSTEPS_TEST_DSN")
    if configured:
        yield configured
        return
    with ExitStack() as stack:
        if _docker_answers():
            from testcontainers.postgres import PostgresContainer

            container = stack.enter_context(PostgresContainer("postgres:16", driver=None))
            yield container.get_connection_url()
            return
        from otel_jobsteps.embedded import embedded_server

        yield stack.enter_context(embedded_server())


@pytest.fixture(scope="session")
def template_database(server_dsn: str) -> Iterator[str]:
    name = f"otel_jobsteps_tmpl_{uuid.uuid4().hex[:8]}"
    create_database(server_dsn, name)
    partitioned = os.environ.get("OTEL_JOBSTEPS_TEST_LAYOUT") == "partitioned"
    migrate(
        database_dsn(server_dsn, name),
        partition_interval=PARTITION_INTERVAL if partitioned else None,
    )
    yield name
    drop_database(server_dsn, name)


@pytest.fixture
def dsn(server_dsn: str, template_database: str) -> Iterator[str]:
    """A fresh, migrated database for this test."""
    name = f"otel_jobsteps_test_{uuid.uuid4().hex[:12]}"
    create_database(server_dsn, name, template=template_database)
    yield database_dsn(server_dsn, name)
    drop_database(server_dsn, name)


@pytest.fixture
def empty_dsn(server_dsn: str) -> Iterator[str]:
    """A fresh database without the schema (for migration tests)."""
    name = f"otel_jobsteps_empty_{uuid.uuid4().hex[:12]}"
    create_database(server_dsn, name)
    yield database_dsn(server_dsn, name)
    drop_database(server_dsn, name)


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


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
