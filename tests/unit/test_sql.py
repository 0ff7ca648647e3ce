"""The SQL files as the code reads them: named blocks, migrations, row layouts."""

from __future__ import annotations

import re
from dataclasses import fields

import pytest

from otel_jobsteps._core.batch import EventRow, JobLogRow
from otel_jobsteps.sql import load_queries, migrations

_PARAMETER = re.compile(r"%\((\w+)\)b")


def test_the_loader_returns_every_named_block_without_headers() -> None:
    queries = load_queries()
    assert set(queries) >= {
        "abandon_earlier_attempts",
        "close_foreign_steps",
        "write_progress",
        "close_steps",
        "insert_events",
        "copy_events",
        "insert_job_logs",
        "refresh_heartbeats",
    }
    assert all(text and "-- name:" not in text for text in queries.values())


def test_migrations_are_numbered_without_gaps() -> None:
    versions = [version for version, _, _ in migrations()]
    assert versions == list(range(1, len(versions) + 1))


@pytest.mark.parametrize(
    ("block", "row"), [("insert_events", EventRow), ("insert_job_logs", JobLogRow)]
)
def test_unnest_columns_match_the_row_fields(block: str, row: type) -> None:
    """The store sends one array per field, by name; the SQL unnests them in field order."""
    text = load_queries()[block]
    names = [f.name for f in fields(row) if f.name != "segment"]
    assert _PARAMETER.findall(text) == names
    aliases = text.split(" AS t (", 1)[1].split(")", 1)[0]
    assert [a.strip() for a in aliases.split(",")] == [*names, "n"]
