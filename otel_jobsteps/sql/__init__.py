"""SQL kept as SQL: named runtime queries and numbered migrations, loaded from package files."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, cast

import psycopg
from psycopg import sql

if TYPE_CHECKING:
    from typing_extensions import LiteralString

__all__ = ["Statement", "load_queries", "migrations", "qualified_queries", "rendered_queries"]

Statement = bytes | sql.Composed  # a query as `rendered_queries` gives it

_NAME = re.compile(r"^-- name: (\w+) --$", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_(\w+)\.sql$")


# Relations the SQL files name as {placeholders}, filled in schema-qualified.
_RELATIONS = (
    "job_event",
    "job_log",
    "job_attempt",
    "job_current_attempt",
    "job_step_duration",
    "job_latest_attempt",  # functions: {job_latest_attempt}(domain, job_id)
    "job_step_durations",  # {job_step_durations}(closed_since)
    "job_duration",  # {job_duration}(started_at, ended_at): clamped, never negative
    "job_retry_tax",  # {job_retry_tax}(ended_since): the view's function
    "job_tagged",  # {job_tagged}(name, value, since, domain, type, status, scan, limit)
    "otlp_trace",  # OTLP ingest staging
    "otlp_span",
    "otlp_job",
    "otlp_attempt",
    "otlp_log",
)


@cache
def load_queries(file_name: str = "queries.sql") -> dict[str, LiteralString]:
    """The blocks of a SQL file of this package by name (text before the first header is the
    file's intro); ``queries.sql``, the writer's statements, by default."""
    text = resources.files(__package__).joinpath(file_name).read_text("utf-8")
    parts = _NAME.split(text)[1:]
    pairs = zip(parts[::2], parts[1::2], strict=True)
    return {name: cast("LiteralString", body.strip()) for name, body in pairs}


@cache
def migrations() -> tuple[tuple[int, str, LiteralString], ...]:
    """``(version, name, sql)`` of every migration file, in version order."""
    found = []
    for entry in resources.files(__package__).joinpath("migrations").iterdir():
        match = _MIGRATION.match(entry.name)
        if match:
            sql_text = entry.read_text("utf-8")
            found.append((int(match.group(1)), match.group(2), sql_text))
    return tuple(sorted(found))


@cache
def qualified_queries(
    file_name: str, schema: str, fragments: tuple[tuple[str, LiteralString], ...] = ()
) -> dict[str, sql.Composed]:
    """The blocks of a SQL file with its ``{relation}`` names quoted into ``schema``.

    ``fragments`` fill further ``{placeholders}`` with SQL text written in this package (never
    with input): a block that varies by one condition stays one block.
    """
    names: dict[str, sql.Composable] = {name: sql.Identifier(schema, name) for name in _RELATIONS}
    names.update((key, sql.SQL(text)) for key, text in fragments)
    return {name: sql.SQL(text).format(**names) for name, text in load_queries(file_name).items()}


def rendered_queries(
    file_name: str, schema: str, conn: psycopg.Connection[Any]
) -> Mapping[str, Statement]:
    """`qualified_queries` for ``conn``: as bytes where it speaks UTF-8 (rendered once, not at
    every execution: the writer's and collect's statements run per batch and per request)."""
    if conn.info.encoding == "utf-8":
        return _utf8_queries(file_name, schema)
    return qualified_queries(file_name, schema)


@cache
def _utf8_queries(file_name: str, schema: str) -> dict[str, bytes]:
    return {name: query.as_bytes() for name, query in qualified_queries(file_name, schema).items()}
