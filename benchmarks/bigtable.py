"""A realistic big job_event (and job_log), filled in SQL with generate_series.

Five rows per job: four STEP rows (2% of jobs still have their last step open, so the partial
unique index holds ~0.4% of the rows) and one ordinary event (every 20th a STALLED). Jobs are
spread over eight domains, one of them the benchmarks' own, so the workload's index lookups
land among existing keys. Every finished job has its job_log row.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

FILL_EVENTS = """
INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status, detail,
                       message, trace_id, span_id, execution_id, created_at, ended_at)
SELECT CASE WHEN job %% 8 = 0 THEN 'bench' ELSE 'tenant-' || (job %% 8) END,
       'fill-' || job,
       (ARRAY['thumbnail', 'invoice', 'export'])[job %% 3 + 1],
       1,
       CASE WHEN r < 4 THEN 'STEP' WHEN job %% 20 = 0 THEN 'STALLED' ELSE 'LOG' END,
       CASE WHEN r < 4 THEN (ARRAY['FETCH', 'RENDER', 'UPLOAD', 'NOTIFY'])[r + 1] END,
       CASE WHEN r = 4 THEN NULL
            WHEN r = 3 AND job %% 50 = 0 THEN 'RUNNING'
            ELSE 'COMPLETED' END,
       CASE WHEN r < 4 THEN jsonb_build_object('done', r + 1, 'total', 4) END,
       CASE WHEN r = 4 THEN 'worker heartbeat late' END,
       lpad(to_hex(job), 32, '0'),
       lpad(to_hex(g), 16, '0'),
       lpad(to_hex(job), 32, '0') || ':' || lpad(to_hex(job), 16, '0'),
       timestamptz '2025-01-01' + job * interval '50 ms' + r * interval '1 s',
       CASE WHEN r = 4 OR (r = 3 AND job %% 50 = 0) THEN NULL
            ELSE timestamptz '2025-01-01' + job * interval '50 ms' + (r + 1) * interval '1 s' END
FROM generate_series(0, %(rows)s - 1) AS g,
     LATERAL (SELECT g / 5 AS job, g %% 5 AS r) AS split
"""

# Indexes that are not constraints, with the statements that recreate them.
SECONDARY_INDEXES = """
SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
FROM pg_index AS i
WHERE i.indrelid IN ('job_event'::regclass, 'job_log'::regclass)
  AND NOT EXISTS (SELECT FROM pg_constraint AS c WHERE c.conindid = i.indexrelid)
"""

FILL_LOGS = """
INSERT INTO job_log (domain, job_id, job_type, attempt, status, reason, detail, trace_id,
                     created_at)
SELECT CASE WHEN job %% 8 = 0 THEN 'bench' ELSE 'tenant-' || (job %% 8) END,
       'fill-' || job,
       (ARRAY['thumbnail', 'invoice', 'export'])[job %% 3 + 1],
       1,
       CASE WHEN job %% 17 = 0 THEN 'FAILED' ELSE 'COMPLETED' END,
       CASE WHEN job %% 17 = 0 THEN 'error' END,
       CASE WHEN job %% 17 = 0 THEN jsonb_build_object('step', 'NOTIFY') END,
       lpad(to_hex(job), 32, '0'),
       timestamptz '2025-01-01' + job * interval '50 ms' + interval '5 s'
FROM generate_series(0, %(rows)s / 5 - 1) AS job
WHERE job %% 50 <> 0
"""


# The retry tax's summaries of every FAILED final row (migration 0019) and of every
# COMPLETED one after attempt 1 (0022), a statement each.
FILL_SUMMARIES = (
    """
SELECT job_failed_step_refresh(array_agg(domain), array_agg(job_id), array_agg(attempt))
FROM job_log
WHERE status = 'FAILED'
""",
    """
SELECT job_retried_success_refresh(array_agg(domain), array_agg(job_id), array_agg(attempt))
FROM job_log
WHERE status = 'COMPLETED' AND attempt > 1
""",
)


@contextmanager
def summary_filled_after(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """job_log's triggers off while the block fills the tables, then the retry tax's summaries
    filled in a statement each: their deferred events would forbid building job_log's indexes
    again in the same transaction, and would probe job_event once per final row."""
    conn.execute("ALTER TABLE job_log DISABLE TRIGGER USER")
    yield
    for statement in FILL_SUMMARIES:
        conn.execute(statement)
    conn.execute("ALTER TABLE job_log ENABLE TRIGGER USER")


def fill(dsn: str, rows: int) -> dict[str, float]:
    """Fill ``rows`` job_event rows (and their job_log rows), then VACUUM ANALYZE as autovacuum
    eventually would. Returns the seconds each phase took."""
    timings: dict[str, float] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '256MB'")
        started = time.perf_counter()
        with conn.transaction(), summary_filled_after(conn):
            # Secondary indexes are dropped and rebuilt: a sorted build beats 5M inserts into them.
            indexes = conn.execute(SECONDARY_INDEXES).fetchall()
            for name, _definition in indexes:
                conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
            conn.execute(FILL_EVENTS, {"rows": rows})
            conn.execute(FILL_LOGS, {"rows": rows})
            timings["fill_s"] = time.perf_counter() - started
            started = time.perf_counter()
            for _name, definition in indexes:
                conn.execute(sql.SQL(definition))
        timings["index_s"] = time.perf_counter() - started
        started = time.perf_counter()
        conn.execute("VACUUM (ANALYZE) job_event")
        conn.execute("VACUUM (ANALYZE) job_log")
        timings["vacuum_s"] = time.perf_counter() - started
    return timings


def table_counters(dsn: str) -> dict[str, dict[str, int]]:
    """seq_scan / idx_scan / n_tup_ins / n_tup_upd per benchmark table, as the server has them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute(
            "SELECT relname, seq_scan, COALESCE(idx_scan, 0), n_tup_ins, n_tup_upd"
            " FROM pg_stat_user_tables WHERE relname IN ('job_event', 'job_log')"
        ).fetchall()
    return {
        name: {"seq_scan": seq, "idx_scan": idx, "n_tup_ins": ins, "n_tup_upd": upd}
        for name, seq, idx, ins, upd in found
    }


def wait_for_backends_gone(dsn: str, *application_names: str, timeout_s: float = 5.0) -> None:
    """Wait until no session with one of these application names is left on this database.

    A backend flushes its table statistics when it exits, so counters read after this include
    everything those sessions did.
    """
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = ANY(%s)",
                (list(application_names),),
            ).fetchone()
            if not row or row[0] == 0:
                break
            time.sleep(0.02)
    time.sleep(0.05)
