"""Issue 11 and 25: the web page's server time on a big table, and the plans of its statements.

Fills job_event with ``rows`` rows (bigtable.py; 5 M by default), adds one job of 1,000 steps
over 5 attempts, one of 10,000 steps in one attempt and a customer tag on every 10th job, then
requests each page through the ASGI app in process (connection, queries, template: everything
but the network) and reports the median and slowest of 15 runs after two warm-up requests. The
pages that read log lines, and the jobs list with a logging fleet's 200,000 lines the newest
rows, are measured after they are added. The statements of ``sql/web.sql`` (and read.sql's
list_tagged_jobs and job_log_lines) are then explained on the same
table (EXPLAIN ANALYZE, custom and generic plans, as benchmarks.explain does for the read side);
any Seq Scan on job_event or job_log fails. The retry tax over 30 days is read as migrations
0019 and 0022 answer it, side by side (retry_tax.py). Last, `sweep` closes the filled table's
never-closed steps (2 % of its jobs, 20,000 at 5 M rows, spread over the whole heap) and 500
live steps start: /running is measured again as a fleet with that many steps running.

    python -m benchmarks.web [--dsn DSN] [--rows 5000000] [--database DSN_OF_FILLED_DB]
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import datetime, timedelta, timezone
from typing import Any
from unittest import mock

import psycopg
from starlette.testclient import TestClient

from otel_jobsteps import sweep
from otel_jobsteps.web import create_app

from . import explain, metrics, retry_tax
from .bigtable import fill
from .common import Databases, Row, format_table, server, verdict

LONG_JOB = "web-long"
LONG_STEPS, LONG_ATTEMPTS = 1_000, 5
HUGE_JOB, HUGE_STEPS = "web-huge", 10_000
TAGGED_EVERY = 10  # every 10th job of the fill has a customer tag: cust-0 .. cust-999
# (page, URL, target in ms or None); the job page is the 1,000-step job's.
PAGES = (
    ("jobs page, first page", "/", 100.0),
    ("jobs page, failed only", "/?status=failed", 100.0),
    ("jobs page, domain filter", "/?domain=tenant-3", 100.0),
    ("jobs page, search by id prefix (fill-4242...)", "/?q=fill-4242", 100.0),
    ("jobs page, search by a short prefix (fill-1...)", "/?q=fill-1", 100.0),
    ("jobs page, tag filter", "/?tag=customer:cust-7", 100.0),
    ("jobs page, tag filter, failed only", "/?tag=customer:cust-7&status=failed", 100.0),
    ("jobs page, a page deep in the table", "/?before=2025-01-01T08:00:00%2B00:00", 100.0),
    ("JSON list_jobs, tag filter", "/api/jobs?tag=customer:cust-7", 100.0),
    ("job page, 1,000 steps over 5 attempts", f"/jobs/bench/{LONG_JOB}", 200.0),
    (
        "job page, 1,000 steps, a step of attempt 3 selected",
        f"/jobs/bench/{LONG_JOB}?attempt=3&step=PART-500",
        200.0,
    ),
    (f"job page, {HUGE_STEPS:,} steps in one attempt", f"/jobs/bench/{HUGE_JOB}", 200.0),
    ("running page (every open step)", "/running", 100.0),
    ("JSON job_detail, 1,000-step job", f"/api/jobs/bench/{LONG_JOB}", 200.0),
    ("GET /metrics: open and silent steps (every open step)", "/metrics", 100.0),
    ("steps page, last 24 h", "/steps", None),
    ("steps page, every row kept (window=all)", "/steps?window=all", None),
)
# After the log lines are added (add_log_lines): the pages that read them, and the jobs list
# with a logging fleet's lines the newest rows of the table (side by side with the rows above).
CHATTY_JOBS, CHATTY_LINES = 200, 1_000
PAGES_WITH_LOGS = (
    ("jobs page, first page, 200k log lines in the last 10 min", "/", 100.0),
    ("jobs page, failed only, with those log lines", "/?status=failed", 100.0),
    (
        "job page, a step with 1,000 log lines selected",
        f"/jobs/bench/{LONG_JOB}?attempt=3&step=PART-500",
        200.0,
    ),
    ("JSON job_detail, attempt of 1,600 log lines", f"/api/jobs/bench/{LONG_JOB}?attempt=3", 200.0),
)
LOGS_SQL = """
INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, message, detail,
                       created_at)
SELECT 'bench', %(job_id)s, 'export', 3, 'LOG', 'PART-500', 'frame ' || n || ' of 1000',
       jsonb_build_object('severity', CASE WHEN n %% 100 = 0 THEN 'WARN' ELSE 'INFO' END,
                          'attributes', jsonb_build_object('frame', n)),
       s.created_at + n * interval '1 ms'
FROM generate_series(1, 1000) AS n,
     (SELECT created_at FROM job_event WHERE job_id = %(job_id)s AND step_key = 'PART-500'
      AND type = 'STEP') AS s;

INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, message, detail,
                       created_at)
SELECT domain, job_id, job_type, attempt, 'LOG', CASE WHEN n = 1 THEN step_key END,
       'line ' || n || ' of ' || step_key, '{"severity": "INFO", "attributes": {}}',
       created_at + n * interval '10 ms'
FROM job_event, generate_series(1, 3) AS n
WHERE job_id = %(job_id)s AND type = 'STEP';

INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, message, detail,
                       created_at)
SELECT 'bench', 'chatty-' || j, 'export', 1, 'LOG', 'WORK', 'working on item ' || n,
       '{"severity": "INFO", "attributes": {}}',
       now() - (n * %(jobs)s + j) * interval '3 ms'
FROM generate_series(1, %(jobs)s) AS j, generate_series(1, %(lines)s) AS n
"""
LIVE_STEPS = 500
# After `sweep` closed the table's 20,000 never-closed steps: a fleet with 500 steps running.
PAGES_AFTER_SWEEP = (
    (f"running page, {LIVE_STEPS} open steps after sweep", "/running", 100.0),
    ("jobs page, first page, after sweep", "/", 100.0),
)

LIVE_STEPS_SQL = """
INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,
                       execution_id, created_at, heartbeat_at)
SELECT 'bench', 'live-' || n, 'thumbnail', 1, 'STEP', 'RENDER', 'RUNNING', 'live-' || n,
       now() - n * interval '1 s', now() - n * interval '100 ms'
FROM generate_series(1, %(steps)s) AS n
ON CONFLICT DO NOTHING
"""

LONG_JOB_SQL = """
INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status, detail,
                       message, trace_id, span_id, created_at, ended_at)
SELECT 'bench', %(job_id)s, 'export', s / %(per_attempt)s + 1, 'STEP', 'PART-' || s,
       CASE WHEN s %% %(per_attempt)s = %(per_attempt)s - 1 AND s < %(steps)s - 1
            THEN 'FAILED' ELSE 'COMPLETED' END,
       jsonb_build_object('done', s, 'total', %(steps)s),
       NULL,
       lpad(to_hex(s / %(per_attempt)s + 1), 32, 'a'),
       lpad(to_hex(s + 1), 16, '0'),
       now() - interval '1 hour' + s * interval '2 s',
       now() - interval '1 hour' + s * interval '2 s' + interval '1500 ms'
FROM generate_series(0, %(steps)s - 1) AS s;

INSERT INTO job_event (domain, job_id, job_type, attempt, type, message, created_at)
SELECT 'bench', %(job_id)s, 'export', a, 'STALLED', 'lock lost',
       now() - interval '1 hour' + ((a - 1) * %(per_attempt)s + 7) * interval '2 s'
FROM generate_series(1, %(attempts)s) AS a;

INSERT INTO job_log (domain, job_id, job_type, attempt, status, reason, detail, created_at)
SELECT 'bench', %(job_id)s, 'export', a,
       CASE WHEN a < %(attempts)s THEN 'FAILED' ELSE 'COMPLETED' END,
       CASE WHEN a < %(attempts)s THEN 'error' END,
       CASE WHEN a < %(attempts)s THEN jsonb_build_object('error', 'IOError: quota') END,
       now() - interval '1 hour' + a * %(per_attempt)s * interval '2 s'
FROM generate_series(1, %(attempts)s) AS a;
"""


TAGS_SQL = """
INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, message, created_at)
SELECT domain, job_id, job_type, attempt, 'TAG', 'customer',
       'cust-' || (substr(job_id, 6)::bigint / %(every)s %% 1000), min(created_at)
FROM job_event
WHERE job_id LIKE 'fill-%%' AND substr(job_id, 6)::bigint %% %(every)s = 0
GROUP BY domain, job_id, job_type, attempt
"""


def add_long_jobs(dsn: str) -> None:
    """One job of 1,000 steps over 5 attempts (the last step of attempts 1-4 failed), one of
    10,000 steps in one attempt, and a customer tag on every `TAGGED_EVERY`-th filled job."""
    jobs = (
        (LONG_JOB, LONG_STEPS, LONG_ATTEMPTS),
        (HUGE_JOB, HUGE_STEPS, 1),
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM job_event WHERE job_id = %s LIMIT 1", (LONG_JOB,))
        if found.fetchone():
            return
        for job_id, steps, attempts in jobs:
            params = {
                "job_id": job_id,
                "steps": steps,
                "attempts": attempts,
                "per_attempt": steps // attempts,
            }
            for statement in LONG_JOB_SQL.split(";\n\n"):
                conn.execute(statement, params)
        conn.execute(TAGS_SQL, {"every": TAGGED_EVERY})
        conn.execute("ANALYZE job_event")
        conn.execute("ANALYZE job_log")


def add_log_lines(dsn: str) -> None:
    """1,000 log lines in one step of the long job's attempt 3 and three in (or between) each
    of its steps; a fleet of `CHATTY_JOBS` jobs logging `CHATTY_LINES` lines each over the last
    ten minutes, the newest rows of the table."""
    params = {"job_id": LONG_JOB, "jobs": CHATTY_JOBS, "lines": CHATTY_LINES}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in LOGS_SQL.split(";\n\n"):
            conn.execute(statement, params)  # type: ignore[arg-type]
        conn.execute("ANALYZE job_event")


def sweep_and_start_live_steps(dsn: str) -> None:
    """Close the filled table's never-closed steps as `sweep` would, then open live ones."""
    sweep(dsn, timedelta(days=1))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(LIVE_STEPS_SQL, {"steps": LIVE_STEPS})
        conn.execute("VACUUM (ANALYZE) job_event")


def measure(
    dsn: str, repeat: int, pages: tuple[tuple[str, str, float | None], ...] = PAGES
) -> list[Row]:
    """Server time of each page: median and slowest of ``repeat`` requests after a warm-up."""
    found = []
    with TestClient(create_app(dsn)) as client:
        for label, url, target in pages:
            times = []
            runs = repeat if target else min(repeat, 3)  # untargeted pages may be slow ones
            for run in range(runs + 2):
                started = time.perf_counter()
                response = client.get(url)
                elapsed = (time.perf_counter() - started) * 1000
                if response.status_code != 200:
                    raise RuntimeError(f"{url} answered {response.status_code}")
                if run >= 2:
                    times.append(elapsed)
            median = statistics.median(times)
            found.append(
                Row(
                    "11",
                    label,
                    f"{median:.1f} ms median",
                    f"max {max(times):.1f} ms, {len(response.content) // 1024} KiB",
                    "",
                    f"< {target:.0f} ms" if target else "",
                    verdict(median < target) if target else "info",
                )
            )
    return found


# The values of the search statements' parameters that explain.Parameters does not sample.
SEARCH_VALUES: dict[str, Any] = {
    "prefix": "fill-4242",
    "upper": "fill-4243",
    "cap": 1_000,
    "tag_name": "customer",
    "tag_value": "cust-7",
    "scan": 400,
}


# The jobs list's statements that take a page cursor: explained again on a later page.
PAGED = ("jobs_page", "tagged_jobs", "find_jobs")


def later_page(self: explain.Parameters, name: str) -> Any:
    """A cursor below the newest rows: ten minutes back, the sampled job as the last one shown
    (an id search continues after a fill- id)."""
    domain, job_id, _ = self.job
    return {
        "before_at": datetime.now(timezone.utc) - timedelta(minutes=10),
        "before_domain": domain,
        "before_job_id": job_id,
        "after_domain": domain,
        "after_job": "fill-42420",
    }.get(name, SEARCH_VALUES.get(name))


Entries = list[tuple[str, str, str]]
# The reads a log line could slow down, explained again with the log lines in the table.
LOG_READS = ("job_log_lines", "jobs_page", "list_jobs", "list_jobs_in_domain", "job_rows")


def plan_rows(dsn: str, big_rows: int, *, verbose: bool = False) -> list[Row]:
    """EXPLAIN ANALYZE of every web.sql statement (custom and generic plans) on the table, and
    of the paged ones again with a cursor."""
    # explain_all plans every SQL file of the package; only web.sql's statements matter here.
    ours = [
        entry
        for entry in explain.statements()
        if entry[0] == "web.sql" or entry[1] in ("list_tagged_jobs", "job_log_lines")
    ]
    paged = [(f, f"{name}_later_page", text) for f, name, text in ours if name in PAGED]
    return explain_rows(dsn, big_rows, [(ours, False), (paged, True)], "", verbose=verbose)


def explain_rows(
    dsn: str,
    big_rows: int,
    groups: list[tuple[Entries, bool]],
    label: str,
    *,
    verbose: bool = False,
) -> list[Row]:
    """EXPLAIN ANALYZE of each group of statements, with a later page's cursor or without, and
    the verdict (no Seq Scan) as rows."""
    sampled = explain.Parameters._scalar

    def scalar(self: explain.Parameters, name: str) -> Any:
        return SEARCH_VALUES[name] if name in SEARCH_VALUES else sampled(self, name)

    def paged_scalar(self: explain.Parameters, name: str) -> Any:
        found = later_page(self, name)
        return found if found is not None else sampled(self, name)

    plans = []
    for entries, on_later_page in groups:
        with (
            mock.patch.object(explain, "statements", return_value=entries),
            mock.patch.object(
                explain.Parameters, "_scalar", paged_scalar if on_later_page else scalar
            ),
        ):
            plans += explain.explain_all(dsn)
    if verbose:
        explain.print_plans(plans)
    print(explain.summary(plans))
    failing = {plan.name for plan in plans if plan.fails}
    count = len({plan.name for plan in plans})
    rows = [
        Row(
            "11",
            f"EXPLAIN web{label}: {count} statements, custom + generic plans",
            f"{len(failing)} with Seq Scan",
            f"{big_rows:,} rows in job_event",
            "",
            "0",
            verdict(not failing),
        )
    ]
    rows += [
        Row("11", f"  {p.name} ({p.mode} plan)", "; ".join(p.problems), "", "", "", "FAIL")
        for p in plans
        if p.fails
    ]
    return rows


def measure_all(dsn: str, big_rows: int, *, quick: bool, verbose: bool) -> list[Row]:
    """The pages and plans on a filled database, then /running after a sweep."""
    repeat = 3 if quick else 15
    add_long_jobs(dsn)
    rows = measure(dsn, repeat) + plan_rows(dsn, big_rows, verbose=verbose)
    rows += retry_tax.measure(dsn, 3 if quick else 7)  # before and after its second summary (0022)
    rows += metrics.scrape_rows(dsn, repeat)  # /metrics with the opt-in index, side by side
    sweep_and_start_live_steps(dsn)
    # the log lines' pages last: beside "jobs page, first page, after sweep" in the same state
    return rows + measure(dsn, repeat, PAGES_AFTER_SWEEP) + logged_rows(dsn, big_rows, repeat)


def logged_rows(dsn: str, big_rows: int, repeat: int) -> list[Row]:
    """The pages that read log lines and the jobs list behind a fleet's lines, then the plan
    of the log lines' read with them in the table."""
    add_log_lines(dsn)
    rows = measure(dsn, repeat, PAGES_WITH_LOGS)
    reads = [entry for entry in explain.statements() if entry[1] in LOG_READS]
    return rows + explain_rows(dsn, big_rows, [(reads, False)], ", with the log lines")


def run(dbs: Databases, *, big_rows: int, quick: bool = False, verbose: bool = False) -> list[Row]:
    """Fill a fresh database, measure the pages, explain the statements, drop it."""
    dsn = dbs.fresh("web")
    try:
        timings = fill(dsn, big_rows)
        print(f"   filled {big_rows:,} rows: {timings}", flush=True)
        return measure_all(dsn, big_rows, quick=quick, verbose=verbose)
    finally:
        dbs.drop(dsn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="loopback server DSN (default: embedded PostgreSQL)")
    parser.add_argument("--rows", type=int, default=5_000_000, help="job_event rows to fill")
    parser.add_argument("--quick", action="store_true", help="3 requests per page, not 15")
    parser.add_argument("--database", help="an already filled, migrated database to use as is")
    parser.add_argument("--verbose", action="store_true", help="print every plan")
    args = parser.parse_args()
    if args.database:
        rows = measure_all(args.database, args.rows, quick=args.quick, verbose=args.verbose)
    else:
        with server(args.dsn) as server_dsn:
            dbs = Databases(server_dsn)
            try:
                rows = run(dbs, big_rows=args.rows, quick=args.quick, verbose=args.verbose)
            finally:
                dbs.close()
    print()
    print(format_table(rows))


if __name__ == "__main__":
    main()
