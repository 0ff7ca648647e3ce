"""Test database: OTEL_JOBSTEPS_TEST_DSN, else testcontainers, else the embedded server.

One migrated template database per session; each test gets its own clone of it.
OTEL_JOBSTEPS_TEST_LAYOUT=partitioned migrates it with the partitioned layout (interval 1d).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from datetime import timedelta
from typing import Any, TypeVar

import psycopg
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer
from psycopg import sql
from psycopg.conninfo import make_conninfo

from otel_jobsteps import JobStepsProcessor, migrate


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


PARTITION_INTERVAL = timedelta(days=1)


def _database_dsn(server_dsn: str, name: str) -> str:
    return make_conninfo(server_dsn, dbname=name)


def _create_database(server_dsn: str, name: str, template: str | None = None) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            query = sql.SQL("{} TEMPLATE {}").format(query, sql.Identifier(template))
        conn.execute(query)


def _drop_database(server_dsn: str, name: str) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture(scope="session")
def template_database(server_dsn: str) -> Iterator[str]:
    name = f"otel_jobsteps_tmpl_{uuid.uuid4().hex[:8]}"
    _create_database(server_dsn, name)
    partitioned = os.environ.get("OTEL_JOBSTEPS_TEST_LAYOUT") == "partitioned"
    migrate(
        _database_dsn(server_dsn, name),
        partition_interval=PARTITION_INTERVAL if partitioned else None,
    )
    yield name
    _drop_database(server_dsn, name)


@pytest.fixture
def dsn(server_dsn: str, template_database: str) -> Iterator[str]:
    """A fresh, migrated database for this test."""
    name = f"otel_jobsteps_test_{uuid.uuid4().hex[:12]}"
    _create_database(server_dsn, name, template=template_database)
    yield _database_dsn(server_dsn, name)
    _drop_database(server_dsn, name)


@pytest.fixture
def empty_dsn(server_dsn: str) -> Iterator[str]:
    """A fresh database without the schema (for migration tests)."""
    name = f"otel_jobsteps_empty_{uuid.uuid4().hex[:12]}"
    _create_database(server_dsn, name)
    yield _database_dsn(server_dsn, name)
    _drop_database(server_dsn, name)


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


TracingFactory = Callable[..., tuple[Tracer, JobStepsProcessor]]


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


def rows(conn: psycopg.Connection[Any], query: str, *params: Any) -> list[tuple[Any, ...]]:
    return conn.execute(query, params).fetchall()  # type: ignore[arg-type]


T = TypeVar("T")


def wait_until(
    probe: Callable[[], T | None],
    *,
    what: str,
    timeout_s: float = 30.0,
    max_interval_s: float = 0.1,
) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` at the deadline.

    For what another thread, process or server does, where no event can be awaited.
    """
    deadline = time.monotonic() + timeout_s
    interval = 0.002
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval)
        interval = min(interval * 1.5, max_interval_s)
