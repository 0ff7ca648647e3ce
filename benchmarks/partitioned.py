"""Issue 13, the partitioned layout at scale: write throughput with many rows spread over 30 daily
intervals against an empty default-layout database, the plans of every statement on it, how
fast prune moves finished attempts, and what dropping a whole day costs.

The filled database is migrated with ``partition_interval=1 day``; 30 past days get children
holding ``rows`` job_event rows in all (five per job: four closed steps and a LOG event),
written straight into the children in SQL, with their job_log rows (job_log is not
partitioned); the current table gets one more day's share with 2% of its jobs still running
(their last step open). Our processor then runs the target-2 workload on it and on a fresh
empty database, interleaved; rows read from any child during our runs are counted
(``pg_stat_user_tables``; the writer's updates must skip them). EXPLAIN covers every named
statement of the package, with any Seq Scan of job_event, job_log or a non-empty child flagged
(an empty child, like the current interval's, is read by a Seq Scan that costs nothing), and
for each windowed read statement the children it scans for a 1-hour window. Last, prune moves
today's finished jobs (rows/s) and drops the oldest day (seconds).

    python -m benchmarks.partitioned [--dsn DSN] [--rows 5000000] [--jobs 15000]
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql

from otel_jobsteps import migrate

from . import explain
from .bigtable import summary_filled_after, wait_for_backends_gone
from .common import (
    VERIFY_APPLICATION,
    WRITER_APPLICATION,
    Databases,
    Row,
    fmt_rate,
    fmt_ratio,
    median,
    server,
    verdict,
)
from .throughput import ours_once, verify

DAYS = 30
# A Seq Scan on job_event, job_log or a child (which is flagged unless it is empty).
ANY_SEQ_SCAN = re.compile(r"Seq Scan on (job_(?:event|log)\w*)")
# A scan of a job_event child's rows, by any method (a Bitmap Index Scan names an index).
CHILD_SCAN = re.compile(r"(?<!Bitmap Index )Scan(?: Backward)?(?: using \w+)? on (job_event_p\w+)")

# A plan node's condition on the windowed reads' column (job_event_recent's expression).
WINDOW_CONDITION = re.compile(r"(?:Index Cond|Filter|Recheck Cond): .*COALESCE\(")
# The read side's statements with a time window (since_at): explain.py asks for the last hour.
WINDOWED = ("list_jobs", "list_jobs_in_domain", "jobs_page", "step_stats", "step_failures")

# One day's share into one child: jobs of five rows, spread over the day; ids explicit (the
# children have no identity), each day in its own id range above the current tables' range.
FILL_CHILD_EVENTS = """
INSERT INTO {child} (id, domain, job_id, job_type, attempt, type, step_key, step_status, detail,
                     trace_id, span_id, execution_id, created_at, ended_at)
SELECT %(base)s + g,
       CASE WHEN job %% 8 = 0 THEN 'bench' ELSE 'tenant-' || (job %% 8) END,
       'day' || %(day)s || '-' || job, 'thumbnail', 1,
       CASE WHEN r < 4 THEN 'STEP' ELSE 'LOG' END,
       CASE WHEN r < 4 THEN (ARRAY['FETCH', 'RENDER', 'UPLOAD', 'NOTIFY'])[r + 1] END,
       CASE WHEN r < 4 THEN 'COMPLETED' END,
       CASE WHEN r < 4 THEN jsonb_build_object('done', r + 1, 'total', 4) END,
       lpad(to_hex(job), 32, '0'), lpad(to_hex(g), 16, '0'), 'fill',
       %(start)s + job * %(spacing)s + r * interval '1 s',
       CASE WHEN r < 4 THEN %(start)s + job * %(spacing)s + (r + 1) * interval '1 s' END
FROM generate_series(0, %(rows)s - 1) AS g, LATERAL (SELECT g / 5 AS job, g %% 5 AS r) AS split
"""

FILL_DAY_LOGS = """
INSERT INTO job_log (domain, job_id, job_type, attempt, status, trace_id, created_at)
SELECT CASE WHEN job %% 8 = 0 THEN 'bench' ELSE 'tenant-' || (job %% 8) END,
       'day' || %(day)s || '-' || job, 'thumbnail', 1, 'COMPLETED', lpad(to_hex(job), 32, '0'),
       %(start)s + job * %(spacing)s + interval '5 s'
FROM generate_series(0, %(rows)s / 5 - 1) AS job
"""

# Today's share, in the current tables through their identity; 2% of its jobs still running.
FILL_CURRENT = """
WITH jobs AS (
    SELECT job FROM generate_series(0, %(rows)s / 5 - 1) AS job
)
INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status, detail,
                       trace_id, span_id, execution_id, created_at, ended_at)
SELECT CASE WHEN job %% 8 = 0 THEN 'bench' ELSE 'tenant-' || (job %% 8) END,
       'today-' || job, 'thumbnail', 1,
       CASE WHEN r < 4 THEN 'STEP' ELSE 'LOG' END,
       CASE WHEN r < 4 THEN (ARRAY['FETCH', 'RENDER', 'UPLOAD', 'NOTIFY'])[r + 1] END,
       CASE WHEN r = 4 THEN NULL WHEN r = 3 AND job %% 50 = 0 THEN 'RUNNING' ELSE 'COMPLETED' END,
       CASE WHEN r < 4 THEN jsonb_build_object('done', r + 1, 'total', 4) END,
       lpad(to_hex(job), 32, '0'), lpad(to_hex(r), 16, '0'), 'fill',
       %(start)s + job * %(spacing)s + r * interval '1 ms',
       CASE WHEN r = 4 OR (r = 3 AND job %% 50 = 0) THEN NULL
            ELSE %(start)s + job * %(spacing)s + (r + 1) * interval '1 ms' END
FROM jobs, generate_series(0, 4) AS r
"""

FILL_CURRENT_LOGS = """
INSERT INTO job_log (domain, job_id, job_type, attempt, status, trace_id, created_at)
SELECT CASE WHEN job %% 8 = 0 THEN 'bench' ELSE 'tenant-' || (job %% 8) END,
       'today-' || job, 'thumbnail', 1, 'COMPLETED', lpad(to_hex(job), 32, '0'),
       %(start)s + job * %(spacing)s + interval '5 ms'
FROM generate_series(0, %(rows)s / 5 - 1) AS job
WHERE job %% 50 <> 0
"""


def _children(conn: psycopg.Connection[Any]) -> list[tuple[Any, str]]:
    """(lower bound, job_event child) of every interval, oldest first."""
    return [
        (lower, child)
        for lower, child in conn.execute(
            "SELECT p.lower_bound, e.relname FROM otel_jobsteps_partition AS p"
            " JOIN pg_class AS e ON e.oid = p.job_event::regclass ORDER BY p.lower_bound"
        )
    ]


@contextmanager
def indexes_built_after(conn: psycopg.Connection[Any], table: str) -> Iterator[None]:
    """Drop ``table``'s indexes (constraints' too) for the block, then build them again: a sorted
    build beats inserting millions of rows into every index one by one."""
    found = conn.execute(
        "SELECT x.relname, c.conname, pg_get_indexdef(i.indexrelid),"
        "       pg_get_constraintdef(c.oid)"
        " FROM pg_index AS i JOIN pg_class AS x ON x.oid = i.indexrelid"
        " LEFT JOIN pg_constraint AS c ON c.conindid = i.indexrelid"
        "  AND c.conrelid = i.indrelid"
        " WHERE i.indrelid = %s::regclass",
        (table,),
    ).fetchall()
    for index, constraint, _definition, _constraint_definition in found:
        if constraint:
            conn.execute(
                sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(
                    sql.Identifier(table), sql.Identifier(constraint)
                )
            )
        else:
            conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(index)))
    yield
    for _index, constraint, definition, constraint_definition in found:
        if constraint:
            conn.execute(
                sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} {}").format(
                    sql.Identifier(table),
                    sql.Identifier(constraint),
                    sql.SQL(constraint_definition),
                )
            )
        else:
            conn.execute(sql.SQL(definition))


def fill(dsn: str, rows: int) -> dict[str, float]:
    """The partitioned layout with ``rows`` job_event rows over 30 past days, one more day's
    share in the current tables; returns the seconds each phase took.

    Each table is filled without its indexes, which are built after its rows are in (the
    layout allows it: nothing writes to the children but the mover).
    """
    started = time.perf_counter()
    migrate(dsn, partition_interval=timedelta(days=1))
    per_day = max(5, rows // DAYS // 5 * 5)
    timings: dict[str, float] = {"per_day": per_day}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '512MB'")
        spacing = timedelta(seconds=86_000 / (per_day // 5))
        for day in range(1, DAYS + 1):
            conn.execute("SELECT otel_jobsteps_partition_for(now() - %s)", (timedelta(days=day),))
        first_id = 10**12  # far above what the current tables' identity hands out here
        days = [
            {
                "day": day,
                "start": lower,
                "spacing": spacing,
                "rows": per_day,
                "base": first_id + day * per_day,
                "child": child,
            }
            for day, (lower, child) in enumerate(_children(conn)[:DAYS])
        ]
        with summary_filled_after(conn):
            for values in days:
                child = str(values["child"])
                with conn.transaction(), indexes_built_after(conn, child):
                    conn.execute(
                        sql.SQL(FILL_CHILD_EVENTS).format(child=sql.Identifier(child)), values
                    )
                took = time.perf_counter() - started
                print(f"  {child}: {per_day:,} rows, {took:.0f} s", flush=True)
            with conn.transaction(), indexes_built_after(conn, "job_log"):
                for values in days:
                    conn.execute(FILL_DAY_LOGS, values)
                today = lower_of_today(conn)
                current = {"rows": per_day, "start": today, "spacing": spacing / 1000}
                conn.execute(FILL_CURRENT_LOGS, current)
            with conn.transaction(), indexes_built_after(conn, "job_event"):
                conn.execute(FILL_CURRENT, current)
        timings["fill_s"] = time.perf_counter() - started
        started = time.perf_counter()
        # As autovacuum would: the children too (a VACUUM of a parent does not recurse).
        for _lower, child in _children(conn):
            conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(child)))
        conn.execute("VACUUM (ANALYZE) job_event")
        conn.execute("VACUUM (ANALYZE) job_log")
        timings["vacuum_s"] = time.perf_counter() - started
    return timings


def lower_of_today(conn: psycopg.Connection[Any]) -> Any:
    row = conn.execute(
        "SELECT date_bin(interval '1 day', now(), timestamptz '2000-01-01 00:00:00+00')"
    ).fetchone()
    assert row is not None
    return row[0]


def empty_tables(conn: psycopg.Connection[Any]) -> set[str]:
    """The children (and job_event_archive) without a row: a Seq Scan of them reads nothing."""
    found = {"job_event_archive"}
    for _lower, child in _children(conn):
        query = sql.SQL("SELECT NOT EXISTS (SELECT 1 FROM {})").format(sql.Identifier(child))
        row = conn.execute(query).fetchone()
        if row and row[0]:
            found.add(child)
    return found


def seq_scans(plan_text: str, empty: set[str]) -> set[str]:
    """The non-empty tables a plan reads with a Seq Scan."""
    return {name for name in ANY_SEQ_SCAN.findall(plan_text) if name not in empty}


def current_rows(conn: psycopg.Connection[Any]) -> int:
    """Rows in the current tables (not in a child)."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM ONLY job_event) + (SELECT count(*) FROM ONLY job_log)"
    ).fetchone()
    return int(row[0]) if row else 0


def child_rows_read(dsn: str) -> int:
    """Rows read from the children by sequential scans, and tuples fetched through indexes."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT COALESCE(sum(seq_tup_read + COALESCE(idx_tup_fetch, 0)), 0)"
            " FROM pg_stat_user_tables AS s"
            " WHERE s.relid IN (SELECT c.inhrelid FROM pg_inherits AS c"
            "                   WHERE c.inhparent = 'job_event_archive'::regclass)"
        ).fetchone()
    return int(row[0]) if row else 0


def explain_functions(dsn: str) -> list[explain.Plan]:
    """EXPLAIN ANALYZE of every statement the layout's functions run (prepare, one batch of the
    mover, the drop of the oldest interval), custom and generic plans, through auto_explain;
    each call is rolled back."""
    calls = {
        "otel_jobsteps_prepare_partitions": "SELECT otel_jobsteps_prepare_partitions()",
        "otel_jobsteps_archive": "SELECT * FROM otel_jobsteps_archive(1000, now(), '-infinity', 0)",
        "otel_jobsteps_drop_partitions": "SELECT * FROM otel_jobsteps_drop_partitions("
        "(SELECT min(upper_bound) FROM otel_jobsteps_partition))",
    }
    plans: list[explain.Plan] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        notices: list[str] = []
        conn.add_notice_handler(lambda notice: notices.append(notice.message_primary or ""))
        conn.execute("LOAD 'auto_explain'")
        for setting, value in (
            ("log_min_duration", "0"),
            ("log_analyze", "on"),
            ("log_timing", "off"),
            ("log_buffers", "on"),
            ("log_nested_statements", "on"),
            ("log_level", "notice"),
        ):
            conn.execute(
                sql.SQL("SET {} = {}").format(
                    sql.Identifier("auto_explain", setting), sql.Literal(value)
                )
            )
        for name, call in calls.items():
            for mode in ("custom", "generic"):
                notices.clear()
                with conn.transaction(force_rollback=True):
                    conn.execute(
                        sql.SQL("SET LOCAL plan_cache_mode = {}").format(
                            sql.Literal(f"force_{mode}_plan")
                        )
                    )
                    conn.execute(sql.SQL(call))
                nested = [text for text in notices if "Query Text:" in text][:-1]  # not the call
                for number, text in enumerate(nested, 1):
                    executed = re.search(r"Execution Time: ([\d.]+) ms", text)
                    took = re.search(r"duration: ([\d.]+) ms", text)
                    found = executed or took
                    plans.append(
                        explain.Plan(
                            "partitioned.sql",
                            f"{name}#{number}",
                            mode,
                            text,
                            float(found.group(1)) if found else None,
                        )
                    )
    return plans


def children_read(plan: explain.Plan) -> tuple[set[str], set[str]]:
    """(children in the plan, children the execution read): job_event children scanned in a
    node that ran at least once."""
    planned, executed = set(), set()
    for line in plan.text.splitlines():
        found = CHILD_SCAN.search(line)
        if found:
            planned.add(found.group(1))
            if "never executed" not in line:
                executed.add(found.group(1))
    return planned, executed


def window_children(plan: explain.Plan) -> set[str]:
    """The job_event children a plan scans with the window's condition (the others it names
    are probes by job id, as the latest attempt of each job listed)."""
    found: set[str] = set()
    current = None
    for line in plan.text.splitlines():
        scan = CHILD_SCAN.search(line)
        if scan:
            current = scan.group(1)
        elif "->" in line:
            current = None
        elif current and WINDOW_CONDITION.search(line):
            found.add(current)
    return found


def measure(
    dbs: Databases, *, rows: int, jobs: int, repetitions: int, big: str | None, fill_it: bool
) -> dict[str, Any]:
    """Fill (unless ``fill_it`` is False: ``big`` is filled already), then measure."""
    big = big or dbs.fresh("partitioned")
    result: dict[str, Any] = {"empty": [], "big": [], "child_rows": [], "verified": True}
    result["fill"] = fill(big, rows) if fill_it else {"per_day": rows // DAYS // 5 * 5}
    for repetition in range(repetitions):
        # The same layout, empty: what the children and the rows cost is the ratio.
        empty = dbs.fresh("empty")
        migrate(empty, partition_interval=timedelta(days=1))
        run = ours_once(empty, jobs, f"run{repetition}")
        result["verified"] &= verify(empty, f"run{repetition}", jobs) and run["flushed"]
        result["empty"].append(run["rate"])
        dbs.drop(empty)
        prefix = f"big{repetition}"
        wait_for_backends_gone(big, WRITER_APPLICATION, VERIFY_APPLICATION)
        before = child_rows_read(big)
        run = ours_once(big, jobs, prefix)
        wait_for_backends_gone(big, WRITER_APPLICATION)
        result["child_rows"].append(child_rows_read(big) - before)
        result["verified"] &= verify(big, prefix, jobs) and run["flushed"]
        result["big"].append(run["rate"])
        print(
            f"  run {repetition}: empty {result['empty'][-1]:,.0f} steps/s,"
            f" filled {result['big'][-1]:,.0f} steps/s",
            flush=True,
        )
    with psycopg.connect(big, autocommit=True) as conn:
        result["empty_tables"] = empty_tables(conn)
        result["children"] = len(_children(conn))
    result["plans"] = explain.explain_all(big) + explain_functions(big)
    with psycopg.connect(big, autocommit=True) as conn:
        before = current_rows(conn)
        started = time.perf_counter()
        cursor: tuple[Any, int] = ("-infinity", 0)
        while True:
            found = conn.execute(
                "SELECT * FROM otel_jobsteps_archive(1000, now(), %s, %s)", cursor
            ).fetchone()
            if not found or not found[3]:
                break
            cursor = (found[0], found[1])
        result["move_s"] = time.perf_counter() - started
        result["moved_rows"] = before - current_rows(conn)
        oldest = _children(conn)[0][0]
        started = time.perf_counter()
        dropped = conn.execute(
            "SELECT * FROM otel_jobsteps_drop_partitions(%s + interval '1 day')", (oldest,)
        ).fetchall()
        result["drop_s"] = time.perf_counter() - started
        result["dropped"] = dropped
    return result


def rows_of(result: dict[str, Any], *, rows: int, jobs: int) -> list[Row]:
    empty, big = median(result["empty"]), median(result["big"])
    ok = "rows verified" if result["verified"] else "ROWS MISSING"
    flagged = sorted(
        {
            f"{plan.source} {plan.name}"
            for plan in result["plans"]
            if seq_scans(plan.text, result["empty_tables"])
        }
    )
    per_day = int(result["fill"]["per_day"])
    dropped = result["dropped"]
    drop_rows = sum(int(events) for _lower, events in dropped)
    window_read = max(
        (
            len(window_children(plan))
            for plan in result["plans"]
            if plan.name in WINDOWED and plan.mode == "custom"
        ),
        default=0,
    )
    return [
        Row(
            "13",
            f"partitioned: ours, {rows:,} rows in 30 days ({jobs * 3:,} steps, {ok})",
            fmt_rate(big),
            f"the same layout empty {fmt_rate(empty)}",
            fmt_ratio(big / empty),
            ">= 0.80x",
            verdict(big >= 0.8 * empty and result["verified"]),
        ),
        Row(
            "13",
            "partitioned: child rows read by the writer",
            f"{sum(result['child_rows'])}",
            "pg_stat_user_tables",
            "",
            "0",
            verdict(sum(result["child_rows"]) == 0),
        ),
        Row(
            "13",
            f"partitioned: EXPLAIN {len(result['plans'])} plans (custom + generic)",
            f"{len(flagged)} statements with Seq Scan",
            ", ".join(flagged) or "job_event, job_log and non-empty children",
            "",
            "0",
            verdict(not flagged),
        ),
        Row(
            "13",
            "partitioned: children a 1-hour window reads (custom plans)",
            f"at most {window_read}",
            f"of {result['children']} children, {len(WINDOWED)} windowed read statements",
            "",
            "the window's",
        ),
        Row(
            "13",
            "partitioned: prune moves finished attempts",
            fmt_rate(result["moved_rows"] / max(result["move_s"], 1e-9), "rows/s"),
            f"{result['moved_rows']:,} rows in {result['move_s']:.1f} s",
        ),
        Row(
            "13",
            "partitioned: prune drops one day",
            f"{result['drop_s'] * 1000:.0f} ms",
            f"{drop_rows:,} job_event rows (of {per_day:,}/day)",
        ),
    ]


def plan_report(result: dict[str, Any]) -> list[str]:
    """One line per statement and plan: Seq Scans of non-empty tables, children read."""
    lines = []
    for plan in result["plans"]:
        planned, executed = children_read(plan)
        scans = sorted(seq_scans(plan.text, result["empty_tables"]))
        took = f"{plan.execution_ms:9.1f} ms" if plan.execution_ms is not None else "        ? ms"
        lines.append(
            f"  {plan.source:16} {plan.name:36} {plan.mode:7} {took}"
            f"  seq scans: {', '.join(scans) or '0':28}"
            f"  children planned {len(planned):2}, read {len(executed):2},"
            f" by the window {len(window_children(plan)):2}"
            + ("  NOT EXPLAINED" if plan.text.startswith("could not explain") else "")
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="loopback server DSN (default: embedded PostgreSQL)")
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--jobs", type=int, default=15_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument(
        "--database",
        help="create and fill this database instead of a throwaway one (it must not exist)",
    )
    parser.add_argument(
        "--reuse", action="store_true", help="--database is filled already: measure only"
    )
    parser.add_argument(
        "--keep", action="store_true", help="do not drop the database this run created"
    )
    parser.add_argument("--verbose", action="store_true", help="print the flagged plans")
    args = parser.parse_args()
    with server(args.dsn) as server_dsn:
        dbs = Databases(server_dsn)
        big = dbs.dsn(args.database) if args.database else None
        created = False  # only a database this run created is ever dropped
        try:
            if big is not None and not args.reuse:
                with psycopg.connect(server_dsn, autocommit=True) as conn:
                    conn.execute(
                        sql.SQL("CREATE DATABASE {}").format(sql.Identifier(args.database))
                    )
                created = True
            result = measure(
                dbs,
                rows=args.rows,
                jobs=args.jobs,
                repetitions=args.repetitions,
                big=big,
                fill_it=not args.reuse,
            )
        finally:
            if big is not None and created and not args.keep:
                dbs.drop(big)
            dbs.close()
    print(f"fill: {result['fill']}")
    print("\n".join(plan_report(result)))
    if args.verbose:
        for plan in result["plans"]:
            if seq_scans(plan.text, result["empty_tables"]):
                print(f"-- {plan.source} {plan.name} ({plan.mode})\n{plan.text}\n")
    for row in rows_of(result, rows=args.rows, jobs=args.jobs):
        print(f"{row.measure:75} {row.value:>22} {row.compared:>40} {row.ratio:>7} {row.verdict}")


if __name__ == "__main__":
    main()
