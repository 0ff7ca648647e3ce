"""migrate applies each migration once, by version, and refuses a schema whose applied
migration of some version is not this build's (an unreleased one, replaced since)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from otel_jobsteps import ConfigurationError, migrate


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
