"""serve's /metrics gauges and /running read the open steps from job_event_open_gauges alone
(an Index Only Scan, no heap page once vacuumed), and the writer's guarded statements never
take that index (test_open_step_plans counts what they read)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg

from otel_jobsteps.sql import qualified_queries

# A limit for the steps filled below (overdue after 60 s) and one for a key with none open.
LIMITS = {"job_types": ["t", None], "step_keys": ["A", "A"], "seconds": [60.0, 1.0]}
PARAMS = {
    "silent_after": timedelta(minutes=5),
    "older_than": timedelta(0),
    "limit": 50,
    **LIMITS,
}


def _scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of ``plan`` that reads job_event (a scan of it or of one of its indexes)."""
    found = [plan] if plan.get("Relation Name") == "job_event" else []
    for child in plan.get("Plans", []):
        found += _scans(child)
    return found


def _plan(conn: psycopg.Connection[Any], statement: str) -> list[dict[str, Any]]:
    query = qualified_queries("web.sql", "public")[statement]
    explained = conn.execute(
        psycopg.sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) {}").format(query), PARAMS
    ).fetchone()
    assert explained is not None
    return _scans(explained[0][0]["Plan"])


def test_the_gauges_and_running_read_open_steps_from_the_index(
    conn: psycopg.Connection[Any],
) -> None:
    # 40,000 closed steps and 400 open ones among them, an hour old: silent.
    conn.execute(
        "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,"
        " created_at, ended_at)"
        " SELECT 'd', 'j-' || n, 't', 1, 'STEP', 'A', 'COMPLETED', now() - interval '1 hour',"
        " CASE WHEN n % 100 = 0 THEN NULL ELSE now() END FROM generate_series(1, 40000) AS n"
    )
    conn.execute("VACUUM (ANALYZE) job_event")
    (gauges,) = _plan(conn, "open_step_gauges")
    assert (gauges["Node Type"], gauges["Index Name"]) == (
        "Index Only Scan",
        "job_event_open_gauges",
    )
    assert gauges["Heap Fetches"] == 0
    candidates, shown = sorted(_plan(conn, "open_steps"), key=lambda n: n["Node Type"])
    assert (candidates["Node Type"], candidates["Index Name"]) == (
        "Index Only Scan",
        "job_event_open_gauges",
    )
    assert candidates["Heap Fetches"] == 0
    assert shown["Index Name"] == "job_event_pkey"  # only the rows shown, by id
    assert shown["Actual Loops"] == PARAMS["limit"]
    rows = conn.execute(qualified_queries("web.sql", "public")["open_step_gauges"], PARAMS)
    assert rows.fetchall() == [("d", "t", "A", 400, 400, 400)]
