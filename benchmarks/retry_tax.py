"""Issue 40: the retry tax over the big table's failures, before and after its summary.

On a filled database (bigtable.py: 5 M job_event rows, one job in 17 FAILED, 57,647 failed
attempts at 5 M rows), over a window from the oldest final row (the issue's "30 days of 5 M
rows": every failure inside it), reads ``job_retry_tax(since)`` as migration 0019
answers it (the summary job_failed_step, kept by job_log's triggers) and as migration 0017
answered it (every failed attempt's step rows probed at each call; its function is created
again from the migration's text as a temporary function), in turns, so both see the same
machine. Both must give the same rows. Reports the median and fastest of ``repeat`` calls each
after a warm-up call, and the summary's size; then the same with every failed job retried to
success a minute later (attempt 2 and its completion added in a transaction rolled back after),
so that the time to success, empty on the fill, reads 57,647 retried jobs.

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
# 0017's function, created again under this name for the session (pg_temp).
BEFORE = "pg_temp.job_retry_tax_0017"
AFTER = "job_retry_tax"


def function_0017() -> str:
    """CREATE FUNCTION of migration 0017's job_retry_tax, renamed to ``BEFORE``."""
    text = (
        resources.files("otel_jobsteps")
        .joinpath("sql", "migrations", "0017_retry_tax.sql")
        .read_text("utf-8")
    )
    start = text.index("CREATE FUNCTION job_retry_tax(")
    end = text.index("\nEND;", start) + len("\nEND;")
    return text[start:end].replace("FUNCTION job_retry_tax(", f"FUNCTION {BEFORE}(", 1)


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


# Every failed attempt of the fill retried to success a minute later: attempt 2's four steps
# and its COMPLETED final row (rolled back after the reads).
RETRY_ALL = """
WITH failed AS (
    SELECT domain, job_id, job_type, created_at FROM job_log WHERE status = 'FAILED'
), steps AS (
    INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,
                           created_at, ended_at)
    SELECT f.domain, f.job_id, f.job_type, 2, 'STEP', k.key, 'COMPLETED',
           f.created_at + (60 + k.n) * interval '1 s', f.created_at + (61 + k.n) * interval '1 s'
    FROM failed AS f,
         unnest(ARRAY['FETCH', 'RENDER', 'UPLOAD', 'NOTIFY']) WITH ORDINALITY AS k (key, n)
)
INSERT INTO job_log (domain, job_id, job_type, attempt, status, created_at)
SELECT domain, job_id, job_type, 2, 'COMPLETED', created_at + interval '66 s'
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
            f"{label}: before (0017: each failure's steps probed)",
            f"{before:.0f} ms median",
            f"min {min(times[BEFORE]):.0f} ms",
            "",
            "",
            "info",
        ),
        Row(
            "40",
            f"{label}: after (0019: summary job_failed_step)",
            f"{after:.0f} ms median",
            f"min {min(times[AFTER]):.0f} ms; {size}",
            f"{before / after:.1f}x faster",
            f"< {TARGET_MS:.0f} ms",
            verdict(after < TARGET_MS),
        ),
    ]


def measure(dsn: str, repeat: int) -> list[Row]:
    """Both reads in turns on the filled database at ``dsn``, then again with every failure
    retried to success (rolled back); rows for the result table."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(cast(LiteralString, function_0017()))
        # A window holding every failure kept: the fill's are older than 30 days from now.
        (since,) = conn.execute("SELECT min(created_at) FROM job_log").fetchone() or (None,)
        failed, summary_rows, size = conn.execute(
            "SELECT (SELECT count(*) FROM job_log WHERE status = 'FAILED' AND created_at >= %s),"
            " count(*), pg_size_pretty(pg_total_relation_size('job_failed_step'))"
            " FROM job_failed_step",
            (since,),
        ).fetchone() or (0, 0, "")
        summary = f"{summary_rows:,} summary rows, {size}"
        label = f"job_retry_tax, every failure kept ({failed:,} failed attempts)"
        rows = _pair(label, _rounds(conn, since, repeat)[0], summary)
        with conn.transaction(force_rollback=True):
            conn.execute(RETRY_ALL)
            conn.execute("ANALYZE job_log")
            times, found = _rounds(conn, since, repeat)
        if not any(row[4] is not None for row in found):
            raise RuntimeError(f"no time to success with every failure retried: {found}")
    return rows + _pair(f"{label}, each retried to success", times, summary)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", required=True, help="a filled, migrated database")
    parser.add_argument("--repeat", type=int, default=7, help="calls of each read (default 7)")
    args = parser.parse_args()
    print(format_table(measure(args.database, args.repeat)))


if __name__ == "__main__":
    main()
