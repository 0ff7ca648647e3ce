"""Issue 40: the retry tax over the big table's failures, as migrations 0019 and 0022 answer it.

On a filled database (bigtable.py: 5 M job_event rows, one job in 17 FAILED, 57,647 failed
attempts at 5 M rows), over a window from the oldest final row (the issue's "30 days of 5 M
rows": every failure inside it), reads ``job_retry_tax(since)`` as migration 0022 answers it
(the summaries job_failed_step and job_retried_success, kept by job_log's triggers) and as
migration 0019 answered it (job_failed_step summed, then per failure of the window its next
completion, the job's previous completion and its first attempt's start probed at each call;
its function is created again from the migration's text as a temporary function, with the
partial index it read, dropped since), in turns, so both see the same machine. Both must give
the same rows. Reports the median and fastest of ``repeat`` calls each after a warm-up call, and
the summaries' sizes; then the same with every failed job retried to success a minute later
(attempt 2 and its completion added, job_log's triggers run at the statement's end, rolled back
after), so that the time to success, empty on the fill, reads 57,647 retried jobs.

    python -m benchmarks.retry_tax --database DSN_OF_FILLED_DB [--repeat 7]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from importlib import resources
from typing import Any, LiteralString, cast

import psycopg

from .common import Row, format_table, verdict

TARGET_MS = 500.0
# Migration 0017's function, the answers both summaries must give (the tests' reference), and
# 0019's, created again under these names for the session (pg_temp).
REFERENCE = "pg_temp.job_retry_tax_0017"
BEFORE = "pg_temp.job_retry_tax_0019"
AFTER = "job_retry_tax"
# 0019's index for the completions after failures, which its function read (dropped by 0022).
RETRIED_COMPLETION_INDEX = """
CREATE INDEX job_log_retried_completion ON job_log (domain, job_id, attempt)
    WHERE status = 'COMPLETED' AND attempt > 1
"""


def migration_function(migration: str, name: str) -> str:
    """CREATE FUNCTION of job_retry_tax as ``migration`` (a file name) wrote it, renamed."""
    text = (
        resources.files("otel_jobsteps").joinpath("sql", "migrations", migration).read_text("utf-8")
    )
    start = text.index("FUNCTION job_retry_tax(")
    end = text.index("\nEND;", start) + len("\nEND;")
    return f"CREATE {text[start:end]}".replace("FUNCTION job_retry_tax(", f"FUNCTION {name}(", 1)


def function_0017() -> str:
    """CREATE FUNCTION of migration 0017's job_retry_tax, renamed to ``REFERENCE``."""
    return migration_function("0017_retry_tax.sql", REFERENCE)


def _call(conn: psycopg.Connection[Any], function: str, since: Any) -> tuple[float, list[Any]]:
    query = cast(LiteralString, f"SELECT * FROM {function}(%s) ORDER BY 1, 2")
    started = time.perf_counter()
    found = conn.execute(query, (since,)).fetchall()
    return (time.perf_counter() - started) * 1000, found


def same_rows(before: Any, after: Any) -> bool:
    """The same rows (or lists of them), sums of seconds equal but for the order they were
    added in."""
    if isinstance(before, float) and isinstance(after, float):
        return math.isclose(before, after, rel_tol=1e-9)
    if isinstance(before, list | tuple) and isinstance(after, list | tuple):
        return len(before) == len(after) and all(map(same_rows, before, after))
    return bool(before == after)


# Every failed attempt of the fill that is its job's last retried to success a minute later:
# the next attempt's four steps and its COMPLETED final row (rolled back after the reads). A
# failure followed by another attempt already (the web section's long job) is left as it is.
RETRY_ALL = """
WITH failed AS (
    SELECT l.domain, l.job_id, l.job_type, l.attempt + 1 AS next, l.created_at
    FROM job_log AS l
    WHERE l.status = 'FAILED'
      AND NOT EXISTS (SELECT 1 FROM job_log AS n
                      WHERE n.domain = l.domain AND n.job_id = l.job_id
                        AND n.attempt = l.attempt + 1)
), steps AS (
    INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,
                           created_at, ended_at)
    SELECT f.domain, f.job_id, f.job_type, f.next, 'STEP', k.key, 'COMPLETED',
           f.created_at + (60 + k.n) * interval '1 s', f.created_at + (61 + k.n) * interval '1 s'
    FROM failed AS f,
         unnest(ARRAY['FETCH', 'RENDER', 'UPLOAD', 'NOTIFY']) WITH ORDINALITY AS k (key, n)
)
INSERT INTO job_log (domain, job_id, job_type, attempt, status, created_at)
SELECT domain, job_id, job_type, next, 'COMPLETED', created_at + interval '66 s'
FROM failed
"""


def _rounds(
    conn: psycopg.Connection[Any], since: Any, repeat: int
) -> tuple[dict[str, list[float]], list[Any]]:
    """Both reads in turns, ``repeat`` times each after a warm-up call of each: their times,
    and their rows (the same, or RuntimeError)."""
    times: dict[str, list[float]] = {BEFORE: [], AFTER: []}
    answers: dict[str, list[Any]] = {}
    for run in range(repeat + 1):
        for function in (BEFORE, AFTER):
            elapsed, answers[function] = _call(conn, function, since)
            if run:  # the first call of each warms the cache
                times[function].append(elapsed)
    if not same_rows(answers[BEFORE], answers[AFTER]):
        raise RuntimeError(f"the two reads differ: {answers[BEFORE]} != {answers[AFTER]}")
    return times, answers[AFTER]


def _pair(label: str, times: dict[str, list[float]], size: str) -> list[Row]:
    before, after = (statistics.median(times[f]) for f in (BEFORE, AFTER))
    return [
        Row(
            "40",
            f"{label}: before (0019: each retried job probed)",
            f"{before:.0f} ms median",
            f"min {min(times[BEFORE]):.0f} ms",
            "",
            "",
            "info",
        ),
        Row(
            "40",
            f"{label}: after (0022: summary job_retried_success too)",
            f"{after:.0f} ms median",
            f"min {min(times[AFTER]):.0f} ms; {size}",
            f"{before / after:.1f}x faster",
            f"< {TARGET_MS:.0f} ms",
            verdict(after < TARGET_MS),
        ),
    ]


def measure(dsn: str, repeat: int) -> list[Row]:
    """Both reads in turns on the filled database at ``dsn``, then again with every failure
    retried to success; rows for the result table. Everything is rolled back after."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction(force_rollback=True):
        conn.execute(RETRIED_COMPLETION_INDEX)
        conn.execute(cast(LiteralString, migration_function("0019_retry_tax_summary.sql", BEFORE)))
        # A window holding every failure kept: the fill's are older than 30 days from now.
        (since,) = conn.execute("SELECT min(created_at) FROM job_log").fetchone() or (None,)
        failed = conn.execute(
            "SELECT count(*) FROM job_log WHERE status = 'FAILED' AND created_at >= %s", (since,)
        ).fetchone() or (0,)
        label = f"job_retry_tax, every failure kept ({failed[0]:,} failed attempts)"
        rows = _pair(label, _rounds(conn, since, repeat)[0], _sizes(conn))
        # the deferred triggers run at the statement's end, not at a COMMIT that never comes
        conn.execute("SET CONSTRAINTS ALL IMMEDIATE")
        started = time.perf_counter()
        conn.execute(RETRY_ALL)
        retried_s = time.perf_counter() - started
        conn.execute("ANALYZE job_log")
        times, found = _rounds(conn, since, repeat)
        if not any(row[4] is not None for row in found):
            raise RuntimeError(f"no time to success with every failure retried: {found}")
        rows += _pair(f"{label}, each retried to success", times, _sizes(conn))
        completions = failed[0] or 1
        rows.append(
            Row(
                "40",
                f"  writing the {failed[0]:,} retries (steps, final rows, job_log's triggers)",
                f"{retried_s:.1f} s",
                f"{retried_s / completions * 1000:.2f} ms per retried job",
                "",
                "",
                "info",
            )
        )
    return rows


def _sizes(conn: psycopg.Connection[Any]) -> str:
    """The summaries' rows and sizes."""
    found = conn.execute(
        "SELECT (SELECT count(*) FROM job_failed_step),"
        " pg_size_pretty(pg_total_relation_size('job_failed_step')),"
        " (SELECT count(*) FROM job_retried_success),"
        " pg_size_pretty(pg_total_relation_size('job_retried_success'))"
    ).fetchone()
    failed, failed_size, retried, retried_size = found or (0, "", 0, "")
    return (
        f"job_failed_step {failed:,} rows, {failed_size};"
        f" job_retried_success {retried:,} rows, {retried_size}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", required=True, help="a filled, migrated database")
    parser.add_argument("--repeat", type=int, default=7, help="calls of each read (default 7)")
    args = parser.parse_args()
    print(format_table(measure(args.database, args.repeat)))


if __name__ == "__main__":
    main()
