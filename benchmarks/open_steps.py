"""Writes with 50,000 open steps vs none (issue 15): the writer's cost must not grow with the
steps other workers hold open.

The same workload as the throughput benchmark (jobs of 3 steps with 3 progress events each) runs
on a database where 50,000 attempts of other jobs (a quarter in the same domain) each hold an
open step, and on one where the same 50,000 steps are closed (same table size, so the ratio is
what open steps cost), interleaved, medians compared. Worst case first: statistics taken
while the table was empty (no autovacuum yet) and every statement on its generic plan
(plan_cache_mode = force_generic_plan for the database), which is what made writes stall; then
with fresh statistics and the server's own choice of plan.

    python -m benchmarks.open_steps [--dsn DSN] [--quick]
"""

from __future__ import annotations

import argparse
from typing import Any

import psycopg
from psycopg import sql

from .common import DOMAIN, Databases, Row, fmt_rate, fmt_ratio, median, server, verdict
from .throughput import ours_once, verify

STEPS = 50_000
TARGET_RATIO = 1.5

FILL_STEPS = """
INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,
                       execution_id, created_at, ended_at, heartbeat_at)
SELECT CASE WHEN n %% 4 = 0 THEN %(domain)s ELSE 'tenant-' || (n %% 4) END,
       'long-' || n, 'export', 1, 'STEP', 'EXPORT',
       CASE WHEN %(open)s THEN 'RUNNING' ELSE 'COMPLETED' END,
       'worker-' || (n %% 50), now() - interval '1 hour',
       CASE WHEN %(open)s THEN NULL ELSE now() END, now()
FROM generate_series(1, %(count)s) AS n
"""


def _prepare(dsn: str, *, open_steps: bool, stale: bool) -> None:
    """Steps of other jobs, open or closed; ``stale``: statistics of the empty table and
    generic plans."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if stale:
            conn.execute("ANALYZE job_event")
            name = str(conn.info.dbname)
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET plan_cache_mode = force_generic_plan").format(
                    sql.Identifier(name)
                )
            )
        conn.execute(FILL_STEPS, {"domain": DOMAIN, "count": STEPS, "open": open_steps})
        if not stale:
            conn.execute("VACUUM (ANALYZE) job_event")


def measure(dbs: Databases, *, jobs: int, repetitions: int, stale: bool) -> dict[str, Any]:
    """Steps/s beside open and beside closed steps, interleaved; every run's rows are checked."""
    result: dict[str, Any] = {"closed": [], "open": [], "verified": True}
    for repetition in range(repetitions):
        for label in ("closed", "open"):
            dsn = dbs.fresh(label)
            try:
                _prepare(dsn, open_steps=label == "open", stale=stale)
                prefix = f"{label}{repetition}"
                run = ours_once(dsn, jobs, prefix)
                result["verified"] &= run["flushed"] and verify(dsn, prefix, jobs)
                result[label].append(run["rate"])
            finally:
                dbs.drop(dsn)
    return result


def rows(result: dict[str, Any], *, stale: bool) -> list[Row]:
    closed, with_open = median(result["closed"]), median(result["open"])
    ratio = closed / with_open
    how = "generic plans, statistics of an empty table" if stale else "fresh statistics"
    return [
        Row(
            "15",
            f"writes with {STEPS:,} open steps vs none ({how})",
            fmt_rate(with_open),
            f"{fmt_rate(closed)} beside {STEPS:,} closed",
            fmt_ratio(ratio),
            f"<= {TARGET_RATIO}x",
            verdict(ratio <= TARGET_RATIO and result["verified"]),
        )
    ]


def run(dbs: Databases, *, quick: bool) -> list[Row]:
    jobs, repetitions = (2_000, 1) if quick else (10_000, 3)
    out: list[Row] = []
    for stale in (True, False):
        out += rows(measure(dbs, jobs=jobs, repetitions=repetitions, stale=stale), stale=stale)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="loopback server DSN (default: embedded PostgreSQL)")
    parser.add_argument("--quick", action="store_true", help="smaller run")
    args = parser.parse_args()
    with server(args.dsn) as server_dsn:
        dbs = Databases(server_dsn)
        try:
            for row in run(dbs, quick=args.quick):
                print(f"{row.measure}: {row.value} vs {row.compared} = {row.ratio} {row.verdict}")
        finally:
            dbs.close()


if __name__ == "__main__":
    main()
