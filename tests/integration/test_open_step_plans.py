"""Guarded writes cost the same with 50,000 open steps as with none, even on the plan a
prepared statement falls back to (generic) and with statistics taken while the table was empty
(a fresh install before autovacuum): each input row probes the open-step index, nothing walks it.
And a large batch on a table of closed rows, planned for its values (custom plan, fresh
statistics), still reads each row through an index: no sequential scan of job_event.

Counted, not timed: the rows the statement read in its own transaction (by index or scan)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from otel_jobsteps._core.batch import (
    Abandon,
    CloseForeign,
    CloseStep,
    EventRow,
    FailClosedStep,
    JobLogRow,
    Progress,
)
from otel_jobsteps._pg.store import statement_params
from otel_jobsteps.sql import load_queries, qualified_queries
from tests.helpers import job_rows_read

OPEN_STEPS = 50_000
INPUT_ROWS = 20
AT_US = 1_900_000_000_000_000
# A few rows per input row: the open-step probe, the row by primary key, an arbiter check.
MAX_ROWS_READ = 5 * INPUT_ROWS
BIG_BATCH = 800
CLOSED_ROWS = 200_000  # the benchmarks' quick table, where the planner should pick the index
# The writer's updates of open steps (the inserts have no plan to choose).
GUARDED = (
    "abandon_earlier_attempts",
    "close_foreign_steps",
    "close_steps",
    "fail_sibling_closed_steps",
    "refresh_heartbeats",
    "write_progress",
)


def _operations(statement: str, input_rows: int = INPUT_ROWS) -> dict[str, Any]:
    """Parameters of ``statement`` for ``input_rows`` attempts that each hold an open step."""
    jobs = [f"open-{n}" for n in range(1, input_rows + 1)]
    ops: list[Any]
    if statement == "refresh_heartbeats":
        count = len(jobs)
        return {"domain": ["d"] * count, "job_id": jobs, "attempt": [1] * count,
                "execution_id": ["x"] * count}  # fmt: skip
    if statement == "abandon_earlier_attempts":
        ops = [Abandon("d", job, 2, AT_US) for job in jobs]
    elif statement == "close_foreign_steps":
        ops = [CloseForeign("d", job, 1, "y", AT_US) for job in jobs]
    elif statement == "write_progress":
        ops = [Progress("d", job, 1, "x", "A", {"n": 1}) for job in jobs]
    elif statement == "close_steps":
        ops = [CloseStep("d", job, 1, "x", "A", "COMPLETED", None, None, AT_US) for job in jobs]
    elif statement == "fail_sibling_closed_steps":
        ops = [FailClosedStep("d", job, 1, "x", "00000000000000a1", "E", AT_US) for job in jobs]
    elif statement == "insert_events":
        ops = [
            EventRow("d", job, "t", 2, "STEP", "A", "RUNNING", None, None, None, None, "x",
                     AT_US, None)
            for job in jobs
        ]  # fmt: skip
    else:
        ops = [JobLogRow("d", job, "t", 1, "COMPLETED", None, None, None, AT_US) for job in jobs]
    return statement_params(ops, 65_536)


def _rows_read(conn: psycopg.Connection[Any], statement: str, params: dict[str, Any]) -> int:
    """Rows ``statement`` read from the job tables (index fetches and scans), rolled back."""
    query = qualified_queries("queries.sql", "public")[statement]
    with conn.transaction(force_rollback=True):
        return job_rows_read(conn, lambda: conn.execute(query, params, prepare=True))


# Every statement of the writer but its COPY (no plan: it reads nothing).
@pytest.mark.parametrize("statement", sorted(set(load_queries()) - {"copy_events"}))
def test_a_guarded_write_reads_a_few_rows_per_input_row(
    conn: psycopg.Connection[Any], statement: str
) -> None:
    conn.execute("ANALYZE job_event")  # statistics of an empty table
    conn.execute(
        "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,"
        " execution_id, created_at)"
        " SELECT 'd', 'open-' || n, 't', 1, 'STEP', 'A', 'RUNNING', 'x', now()"
        " FROM generate_series(1, %s) AS n",
        (OPEN_STEPS,),
    )
    conn.execute("SET plan_cache_mode = force_generic_plan")
    read = _rows_read(conn, statement, _operations(statement))
    assert read <= MAX_ROWS_READ, f"{statement} read {read} rows"


@pytest.mark.parametrize("statement", GUARDED)
def test_a_large_batch_planned_for_its_values_reads_through_indexes(
    conn: psycopg.Connection[Any], statement: str
) -> None:
    """The custom plan of a batch of BIG_BATCH open steps among CLOSED_ROWS closed ones: a
    sequential scan of job_event would read every row (the former shape did, issue 13)."""
    conn.execute(
        "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,"
        " execution_id, created_at, ended_at)"
        " SELECT 'd', CASE WHEN n <= %(open)s THEN 'open-' ELSE 'done-' END || n, 't', 1, 'STEP',"
        "        'A', CASE WHEN n <= %(open)s THEN 'RUNNING' ELSE 'COMPLETED' END, 'x', now(),"
        "        CASE WHEN n > %(open)s THEN now() END"
        " FROM generate_series(1, %(rows)s) AS n",
        {"open": BIG_BATCH, "rows": BIG_BATCH + CLOSED_ROWS},
    )
    conn.execute("VACUUM (ANALYZE) job_event")  # fresh statistics: the plan is the planner's pick
    conn.execute("SET plan_cache_mode = force_custom_plan")
    read = _rows_read(conn, statement, _operations(statement, BIG_BATCH))
    assert read <= 5 * BIG_BATCH, f"{statement} read {read} rows"
