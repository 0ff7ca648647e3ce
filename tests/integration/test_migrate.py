"""migrate applies each migration once, by version, and refuses a schema whose applied
migration of some version is not this build's (an unreleased one, replaced since), or a schema
newer than this build knows: then migrate, collect, serve and the processor (auto_migrate or
not, whatever its role) refuse in one line naming both versions, and write nothing."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from otel_jobsteps import ConfigurationError, __version__, migrate
from otel_jobsteps.schema import known_version
from tests.helpers import TracingFactory, free_port, rows
from tests.reads import cli


def test_migrate_twice_applies_nothing_the_second_time(dsn: str) -> None:
    assert migrate(dsn) == []


def test_a_replaced_migration_is_refused(dsn: str, conn: psycopg.Connection[Any]) -> None:
    (version,) = conn.execute("SELECT max(version) FROM otel_jobsteps_migration").fetchone() or (0,)
    conn.execute(
        "UPDATE otel_jobsteps_migration SET name = 'an_older_draft' WHERE version = %s",
        (version,),
    )
    with pytest.raises(ConfigurationError, match="an_older_draft"):
        migrate(dsn)


NEWER = known_version() + 2
REFUSAL = (
    f"the schema 'public' is at version {NEWER}, this otel_jobsteps ({__version__}) knows up to"
    f" {known_version()}: upgrade otel_jobsteps"
)


@pytest.fixture
def newer(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """The test schema as a newer otel_jobsteps left it: two more migrations recorded; returns
    the version table's rows."""
    conn.execute(
        "INSERT INTO otel_jobsteps_migration (version, name) VALUES (%s, 'from_the_future')",
        (NEWER,),
    )
    return rows(conn, "SELECT * FROM otel_jobsteps_migration ORDER BY version")


def test_migrate_refuses_a_newer_schema(
    newer: list[tuple[Any, ...]], dsn: str, conn: psycopg.Connection[Any]
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        migrate(dsn)

    assert str(refused.value) == REFUSAL
    assert rows(conn, "SELECT * FROM otel_jobsteps_migration ORDER BY version") == newer


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(("migrate",), id="migrate"),
        pytest.param(("collect", "--grpc-listen", "off", "--listen"), id="collect"),
        pytest.param(("serve", "--listen"), id="serve"),
    ],
)
def test_the_commands_refuse_a_newer_schema_in_one_line(
    newer: list[tuple[Any, ...]], dsn: str, command: tuple[str, ...]
) -> None:
    listen = (f"127.0.0.1:{free_port()}",) if command[-1] == "--listen" else ()
    done = cli(dsn, *command, *listen)

    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"otel-jobsteps: error: {REFUSAL}"]
    assert done.stdout == ""  # no start line: nothing listened


@pytest.fixture
def writer_role(dsn: str, server_dsn: str) -> Iterator[str]:
    """A role with the writer's rights only (SELECT, INSERT, UPDATE on job_event and job_log);
    yields its DSN."""
    role = f"jobsteps_writer_{uuid.uuid4().hex[:8]}"
    name = sql.Identifier(role)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(name))
        conn.execute(
            sql.SQL("GRANT SELECT, INSERT, UPDATE ON job_event, job_log TO {}").format(name)
        )
    yield make_conninfo(dsn, user=role)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(name))
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE {}").format(name))


@pytest.mark.parametrize(
    ("auto_migrate", "as_writer"),
    [
        pytest.param(True, False, id="auto_migrate"),
        pytest.param(False, False, id="checked"),
        pytest.param(False, True, id="checked-writer_role"),  # reads the version table by 0015
    ],
)
def test_the_processor_refuses_a_newer_schema_and_writes_nothing(
    newer: list[tuple[Any, ...]],
    tracing: TracingFactory,
    conn: psycopg.Connection[Any],
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
    auto_migrate: bool,
    as_writer: bool,
) -> None:
    options: dict[str, Any] = {"auto_migrate": auto_migrate, "shutdown_timeout_ms": 200}
    if as_writer:
        options["dsn"] = request.getfixturevalue("writer_role")
    tracer, processor = tracing(**options)
    with (
        caplog.at_level(logging.WARNING, logger="otel_jobsteps"),
        tracer.start_as_current_span(
            "job", attributes={"job.domain": "render", "job.id": "newer-1", "job.attempt": 1}
        ),
    ):
        pass
    assert not processor.force_flush(500)  # kept and retried, never written

    assert REFUSAL in caplog.text
    assert rows(conn, "SELECT count(*) FROM job_event") == [(0,)]
    assert rows(conn, "SELECT count(*) FROM job_log") == [(0,)]
