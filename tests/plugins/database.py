"""Pytest plugin: the test databases, one migrated template per session and a clone per test.

The server: OTEL_JOBSTEPS_TEST_DSN, else testcontainers, else the embedded server.
OTEL_JOBSTEPS_TEST_LAYOUT=partitioned migrates with the partitioned layout (interval 1d).
"""

from __future__ import annotations

import gc
import os
import uuid
import warnings
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import psycopg
import pytest

from otel_jobsteps import migrate
from tests.helpers import PARTITION_INTERVAL, create_database, database_dsn, drop_database


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
        answered = False
    else:
        answered = True
    if not answered:
        # A failed probe leaves a socket in its traceback: collect it now, or its
        # ResourceWarning fails whichever later test the garbage collector runs in.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
    return answered


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
def second_dsn(empty_dsn: str) -> str:
    """Another fresh, migrated database (the processor writes one, collect the other), in the
    layout the test run uses."""
    partitioned = os.environ.get("OTEL_JOBSTEPS_TEST_LAYOUT") == "partitioned"
    migrate(empty_dsn, partition_interval=PARTITION_INTERVAL if partitioned else None)
    return empty_dsn


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection
