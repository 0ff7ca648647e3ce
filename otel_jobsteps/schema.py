"""Versioned migrations: a version table, an advisory lock, pending files applied in order."""

from __future__ import annotations

from datetime import timedelta
from importlib import resources
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from . import __version__
from ._pg.db import borrowed_connection, check_schema_name
from .errors import ConfigurationError, SchemaNotMigratedError
from .sql import load_queries, migrations

if TYPE_CHECKING:
    from typing_extensions import LiteralString

__all__ = [
    "check_schema_version",
    "check_writable_tables",
    "is_partitioned",
    "known_version",
    "migrate",
    "pending_migrations",
]

VERSION_TABLE = "otel_jobsteps_migration"
LAYOUT_TABLE = "otel_jobsteps_layout"  # present when the partitioned layout is installed


def _partitioned_layout() -> LiteralString:
    return resources.files("otel_jobsteps.sql").joinpath("partitioned.sql").read_text("utf-8")


def _validate_interval(interval: timedelta) -> None:
    if (
        not isinstance(interval, timedelta)
        or interval < timedelta(seconds=1)
        or interval.microseconds
        or interval > timedelta(days=366)
    ):
        raise ConfigurationError(
            f"partition interval must be whole seconds from 1s to 366d, got {interval!r}"
        )


def migrate(
    target: str | psycopg.Connection[Any],
    *,
    schema: str = "public",
    partition_interval: timedelta | None = None,
) -> list[int]:
    """Apply pending migrations to ``schema``; returns the versions applied (empty if current).

    Safe to run from several processes at once: a transaction-level advisory lock serialises
    them, and each version is recorded in the same transaction that applies it.
    ``partition_interval`` also installs (or refreshes) the opt-in partitioned layout
    (``sql/partitioned.sql``): finished attempts' job_event rows move into one child table per
    interval, and `prune` drops whole children. The interval of an installed layout cannot
    change.
    """
    check_schema_name(schema)
    if partition_interval is not None:
        _validate_interval(partition_interval)
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
        done = dict(conn.execute(sql.SQL("SELECT version, name FROM {}").format(table)).fetchall())
        _refuse_newer(schema, max(done, default=0))
        # Migration files use unqualified names: point search_path at the schema for them only.
        conn.execute(
            "SELECT set_config('search_path', %s, true)",
            (sql.Identifier(schema).as_string(conn),),
        )
        for version, name, text in migrations():
            if version in done:
                if done[version] != name:  # a build's unreleased migration, since replaced
                    raise ConfigurationError(
                        f"schema {schema!r} has migration {version} {done[version]!r} applied,"
                        f" but this version's migration {version} is {name!r}: migrate a"
                        " fresh schema (or database) and move the data over"
                    )
                continue
            conn.execute(text)
            conn.execute(
                sql.SQL("INSERT INTO {} (version, name) VALUES (%s, %s)").format(table),
                (version, name),
            )
            applied_now.append(version)
        if partition_interval is not None:
            _install_partitioned_layout(conn, schema, partition_interval)
    return applied_now


def known_version() -> int:
    """The newest migration this otel_jobsteps has."""
    return migrations()[-1][0]


def _refuse_newer(schema: str, version: int | None) -> None:
    """Code that knows fewer migrations than the schema has would write what newer code reads
    otherwise (or undo what it migrated): it stops, saying which side to upgrade."""
    known = known_version()
    if version is not None and version > known:
        raise ConfigurationError(
            f"the schema {schema!r} is at version {version}, this otel_jobsteps"
            f" ({__version__}) knows up to {known}: upgrade otel_jobsteps"
        )


def check_schema_version(conn: psycopg.Connection[Any], *, schema: str = "public") -> None:
    """`ConfigurationError` when ``schema`` is newer than this otel_jobsteps knows.

    A role that may not read the version table (before migration 0015 only its owner could)
    or a schema without one is not refused here.
    """
    queries = load_queries("schema.sql")
    with conn.transaction():
        row = conn.execute(
            queries["version_readable"], {"schema": schema, "table": VERSION_TABLE}
        ).fetchone()
        if not (row and row[0]):
            return
        newest = sql.SQL(queries["newest_version"]).format(
            version_table=sql.Identifier(schema, VERSION_TABLE)
        )
        found = conn.execute(newest).fetchone()
    _refuse_newer(schema, found[0] if found else None)


def pending_migrations(
    target: str | psycopg.Connection[Any], *, schema: str = "public"
) -> list[int]:
    """The versions `migrate` would apply to ``schema`` (every one where it has none); reads."""
    check_schema_name(schema)
    done: set[int] = set()
    with borrowed_connection(target) as conn, conn.transaction():
        if _table_exists(conn, schema, VERSION_TABLE):
            table = sql.Identifier(schema, VERSION_TABLE)
            done = {v for (v,) in conn.execute(sql.SQL("SELECT version FROM {}").format(table))}
    return [version for version, _, _ in migrations() if version not in done]


def _install_partitioned_layout(
    conn: psycopg.Connection[Any], schema: str, interval: timedelta
) -> None:
    """The layout's tables, functions and trigger, its interval, and children ahead of need."""
    conn.execute(_partitioned_layout())
    conn.execute(
        "INSERT INTO otel_jobsteps_layout (partition_interval) VALUES (%s)"
        " ON CONFLICT (singleton) DO NOTHING",
        (interval,),
    )
    row = conn.execute("SELECT partition_interval FROM otel_jobsteps_layout").fetchone()
    if row is None or row[0] != interval:
        raise ConfigurationError(
            f"schema {schema!r} is partitioned by {row[0] if row else None}, not {interval}:"
            " the interval of an installed layout cannot change"
        )
    # The current interval's children and the next one's exist before anything moves there.
    conn.execute(
        "SELECT otel_jobsteps_partition_for(now()), otel_jobsteps_partition_for(now() + %s)",
        (interval,),
    )


def is_partitioned(conn: psycopg.Connection[Any], *, schema: str = "public") -> bool:
    """Whether ``schema`` has the partitioned layout (`migrate` with a partition interval)."""
    return _table_exists(conn, schema, LAYOUT_TABLE)


def _table_exists(conn: psycopg.Connection[Any], schema: str, name: str) -> bool:
    row = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (sql.Identifier(schema, name).as_string(conn),)
    ).fetchone()
    return bool(row and row[0])


def check_writable_tables(conn: psycopg.Connection[Any], *, schema: str = "public") -> None:
    """The writer's check: the schema is not newer than this code (`check_schema_version`), and
    both tables exist with the newest columns it writes.

    Needs only SELECT on the two tables (the writer's role may read nothing else of ours but the
    version table), so it probes the columns with a query that returns no rows.
    """
    check_schema_version(conn, schema=schema)
    try:
        with conn.transaction():
            for table, column in (("job_event", "derived"), ("job_log", "derived")):
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
