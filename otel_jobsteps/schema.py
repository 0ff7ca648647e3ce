"""Versioned migrations: a version table, an advisory lock, pending files applied in order."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from .errors import ConfigurationError, SchemaNotMigratedError
from .sql import migrations
from .store import borrowed_connection

__all__ = ["check_schema", "check_writable_tables", "latest_version", "migrate"]

VERSION_TABLE = "otel_jobsteps_migration"


def latest_version() -> int:
    return migrations()[-1][0]


def _validate(schema: str) -> None:
    if not schema or "\x00" in schema or len(schema) > 63:
        raise ConfigurationError(f"invalid schema name {schema!r} (1-63 characters, no NUL)")


def migrate(target: str | psycopg.Connection[Any], *, schema: str = "public") -> list[int]:
    """Apply pending migrations to ``schema``; returns the versions applied (empty if current).

    Safe to run from several processes at once: a transaction-level advisory lock serialises
    them, and each version is recorded in the same transaction that applies it.
    """
    _validate(schema)
    table = sql.Identifier(schema, VERSION_TABLE)
    applied_now: list[int] = []
    with borrowed_connection(target) as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"otel_jobsteps:{schema}",))
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(table)
        )
        done = {row[0] for row in conn.execute(sql.SQL("SELECT version FROM {}").format(table))}
        # Migration files use unqualified names: point search_path at the schema for them only.
        conn.execute(
            "SELECT set_config('search_path', %s, true)",
            (sql.Identifier(schema).as_string(conn),),
        )
        for version, name, text in migrations():
            if version in done:
                continue
            conn.execute(text)
            conn.execute(
                sql.SQL("INSERT INTO {} (version, name) VALUES (%s, %s)").format(table),
                (version, name),
            )
            applied_now.append(version)
    return applied_now


def check_schema(conn: psycopg.Connection[Any], *, schema: str = "public") -> None:
    """Raise `SchemaNotMigratedError` unless every migration of this version is applied."""
    row = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL",
        (sql.Identifier(schema, VERSION_TABLE).as_string(conn),),
    ).fetchone()
    current = 0
    if row and row[0]:
        found = conn.execute(
            sql.SQL("SELECT max(version) FROM {}").format(sql.Identifier(schema, VERSION_TABLE))
        ).fetchone()
        current = (found[0] if found else None) or 0
    if current < latest_version():
        raise SchemaNotMigratedError(
            f"schema {schema!r} is at version {current}, this otel_jobsteps needs "
            f"{latest_version()}: run `otel-jobsteps migrate`"
        )


def check_writable_tables(conn: psycopg.Connection[Any], *, schema: str = "public") -> None:
    """The writer's check: both tables exist with the newest columns it writes.

    Needs only SELECT on the two tables (the writer's role may read nothing else), so it
    probes the columns with a query that returns no rows instead of reading the version table.
    """
    try:
        with conn.transaction():
            for table, column in (("job_event", "heartbeat_at"), ("job_log", "reason")):
                conn.execute(
                    sql.SQL("SELECT {} FROM {} LIMIT 0").format(
                        sql.Identifier(column), sql.Identifier(schema, table)
                    )
                )
    except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn) as error:
        raise SchemaNotMigratedError(
            f"schema {schema!r} lacks the otel_jobsteps tables or columns ({error}):"
            " run `otel-jobsteps migrate`"
        ) from None
