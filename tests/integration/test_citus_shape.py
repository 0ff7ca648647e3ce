"""The Citus path stays open: the schema holds nothing Citus rejects once docs/scale.md's
preparation has run.

Citus is not installable here, so this inspects the catalog for what ``create_distributed_table``
refuses on tables distributed by ``job_id``: a primary key, unique index or exclusion constraint
without the distribution column, a foreign key that does not pair job_id with job_id, and an
identity column smaller than bigint (Citus gives each node its own range of a bigint sequence).
The preparation block is read from docs/scale.md and run, so the page cannot drift from what is
tested; the writer then still records a job on the prepared schema.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import psycopg
import pytest

from otel_jobsteps import job_attempt, step
from tests.helpers import TracingFactory

SCALE_PAGE = Path(__file__).resolve().parents[2] / "docs" / "scale.md"
DISTRIBUTED = ("job_event", "job_log")
DISTRIBUTION_COLUMN = "job_id"
PREPARE_MARK = "-- citus: prepare"

# One row per thing Citus would refuse: (table, object, why).
REJECTED = """
WITH dist AS (
    SELECT c.oid, c.relname
    FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s AND c.relname = ANY(%(tables)s)
), key_column AS (
    SELECT d.oid, a.attnum
    FROM dist AS d JOIN pg_attribute AS a ON a.attrelid = d.oid AND a.attname = %(column)s
)
SELECT d.relname, i.relname, 'unique index without ' || %(column)s
FROM dist AS d
JOIN pg_index AS x ON x.indrelid = d.oid
JOIN pg_class AS i ON i.oid = x.indexrelid
JOIN key_column AS k ON k.oid = d.oid
WHERE (x.indisunique OR x.indisexclusion)
  AND NOT k.attnum = ANY(x.indkey::int2[])
UNION ALL
SELECT COALESCE(d.relname, r.relname), f.conname, 'foreign key not on ' || %(column)s
FROM pg_constraint AS f
LEFT JOIN dist AS d ON d.oid = f.conrelid
LEFT JOIN dist AS r ON r.oid = f.confrelid
WHERE f.contype = 'f' AND (d.oid IS NOT NULL OR r.oid IS NOT NULL)
  AND NOT (d.oid IS NOT NULL AND r.oid IS NOT NULL
           AND EXISTS (SELECT 1
                       FROM unnest(f.conkey, f.confkey) AS p (own, referenced)
                       JOIN key_column AS mine ON mine.oid = f.conrelid AND mine.attnum = p.own
                       JOIN key_column AS theirs
                         ON theirs.oid = f.confrelid AND theirs.attnum = p.referenced))
UNION ALL
SELECT d.relname, a.attname, 'identity column of type ' || format_type(a.atttypid, NULL)
FROM dist AS d JOIN pg_attribute AS a ON a.attrelid = d.oid
WHERE a.attidentity <> '' AND a.atttypid <> 'bigint'::regtype
ORDER BY 1, 2
"""


def rejected(conn: psycopg.Connection[Any], schema: str = "public") -> list[tuple[str, str, str]]:
    params = {"schema": schema, "tables": list(DISTRIBUTED), "column": DISTRIBUTION_COLUMN}
    return [tuple(row) for row in conn.execute(REJECTED, params)]


def prepare_block() -> str:
    """The SQL block of docs/scale.md that starts with the preparation mark."""
    blocks = re.findall(r"```sql\n(.*?)```", SCALE_PAGE.read_text("utf-8"), re.DOTALL)
    found = [block for block in blocks if block.startswith(PREPARE_MARK)]
    assert len(found) == 1, f"docs/scale.md needs one sql block starting {PREPARE_MARK!r}"
    return str(found[0])


def test_only_the_documented_primary_keys_stand_in_the_way(conn: psycopg.Connection[Any]) -> None:
    # The migrated schema as every install has it: the identity primary keys are the one thing
    # the preparation changes. A new unique index or foreign key without job_id fails here.
    assert rejected(conn) == [
        ("job_event", "job_event_pkey", "unique index without job_id"),
        ("job_log", "job_log_pkey", "unique index without job_id"),
    ]


def test_after_the_documented_preparation_nothing_is_rejected(
    conn: psycopg.Connection[Any], tracing: TracingFactory
) -> None:
    conn.execute(prepare_block())  # the page's text, run as is
    assert rejected(conn) == []
    # The writer's ON CONFLICT targets are still there: a job records as before.
    tracer, processor = tracing()
    with job_attempt("citus", "prepared", "render", tracer=tracer):
        with step("FETCH", tracer=tracer):
            pass
    assert processor.force_flush(30_000)
    steps = conn.execute(
        "SELECT step_key, step_status FROM job_event WHERE job_id = 'prepared'"
    ).fetchall()
    assert steps == [("FETCH", "COMPLETED")]
    logs = conn.execute("SELECT status FROM job_log WHERE job_id = 'prepared'").fetchall()
    assert logs == [("COMPLETED",)]


@pytest.mark.parametrize(
    ("ddl", "expected"),
    [
        pytest.param(
            "CREATE UNIQUE INDEX trace_once ON job_event (trace_id, span_id)",
            ("job_event", "trace_once", "unique index without job_id"),
            id="unique-index",
        ),
        pytest.param(
            "ALTER TABLE job_event ADD CONSTRAINT by_log FOREIGN KEY (domain, job_id, attempt)"
            " REFERENCES job_log (domain, job_id, attempt)",
            None,
            id="colocated-foreign-key-is-fine",
        ),
        pytest.param(
            "CREATE UNIQUE INDEX job_event_id ON job_event (id);"
            " CREATE TABLE job_note (id bigint, event_id bigint REFERENCES job_event (id))",
            ("job_event", "job_note_event_id_fkey", "foreign key not on job_id"),
            id="foreign-key-from-elsewhere",
        ),
    ],
)
def test_the_inspection_catches_what_citus_refuses(
    conn: psycopg.Connection[Any], ddl: str, expected: tuple[str, str, str] | None
) -> None:
    conn.execute(prepare_block())
    conn.execute(ddl)
    # job_event_id, the key the foreign key case points at, is itself a rejection.
    found = [row for row in rejected(conn) if row[1] != "job_event_id"]
    assert found == ([expected] if expected else [])
