"""The partitioned layout (``migrate --partitioned``) on a real PostgreSQL: the writer's
guarantees hold while finished attempts' job_event rows move into their interval's child,
intervals roll over under running jobs, prune drops whole intervals, and an existing install
converts.

Most tests use a one-second interval so that boundaries pass while jobs run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer
from psycopg import sql

from otel_jobsteps import JobStepsProcessor, job_attempt, job_detail, migrate, progress, prune, step
from otel_jobsteps.query import window_start
from otel_jobsteps.schema import is_partitioned
from otel_jobsteps.sql import qualified_queries
from tests.helpers import counts, finished_attempt, open_step, rows, wait_until

SECOND = timedelta(seconds=1)
KEEP_ALL = timedelta(days=3650)  # a prune that only moves finished attempts
RUN_FOR_S = 2.5  # long enough for jobs to span a few one-second intervals
# Two job loops outrun one writer each (thousands of jobs a second against its 50,000-item
# queue): unpaced, the queue filled and dropped spans whenever the writer was slowed.
FLUSH_EVERY = 100
PROBLEMS = ("rejected", "drop", "write_failed", "internal_error")


@pytest.fixture
def layout_dsn(empty_dsn: str) -> str:
    """A database with the partitioned layout, one interval per second."""
    migrate(empty_dsn, partition_interval=SECOND)
    return empty_dsn


@pytest.fixture
def layout_conn(layout_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(layout_dsn, autocommit=True) as connection:
        yield connection


class Worker:
    """A processor on its own provider; ``tracer`` for its jobs; stopped at the end."""

    def __init__(self, dsn: str) -> None:
        self.processor = JobStepsProcessor(dsn, debounce_ms=0)
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)
        self.tracer: Tracer = self.provider.get_tracer("tests.partitioned")

    def run(self, job_id: str, attempts_made: int = 0, *, execution: str | None = None) -> None:
        with job_attempt(
            "part", job_id, "render", attempts_made, execution=execution, tracer=self.tracer
        ):
            for key in ("FETCH", "RENDER"):
                with step(key, tracer=self.tracer):
                    progress(key=key)

    def stop(self) -> dict[str, Any]:
        """Flush and shut down; the problems the processor counted (none expected)."""
        assert self.processor.force_flush(30_000)
        stats = self.processor.stats()
        self.provider.shutdown()
        return {k: v for k, v in stats.items() if k.startswith(PROBLEMS)}


def split_attempts(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Attempts whose job_event rows are not all in one table (the current one or a child)."""
    return rows(
        conn,
        "SELECT job_id, attempt, array_agg(DISTINCT tableoid::regclass::text) FROM job_event"
        " GROUP BY 1, 2 HAVING count(DISTINCT tableoid) > 1",
    )


def misplaced(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    """Attempts whose rows in a child do not belong there: the child is the interval of the
    latest of those rows and the final row (rows that came after their attempt moved follow it
    into the child of their own interval)."""
    return rows(
        conn,
        "SELECT e.job_id, e.attempt, p.job_event FROM job_event_archive AS e"
        " JOIN otel_jobsteps_partition AS p ON e.tableoid = p.job_event::regclass"
        " JOIN job_log AS l USING (domain, job_id, attempt)"
        " GROUP BY 1, 2, 3, p.lower_bound, p.upper_bound"
        " HAVING GREATEST(max(l.created_at), max(COALESCE(e.ended_at, e.created_at)))"
        "        NOT BETWEEN p.lower_bound AND p.upper_bound - interval '1 microsecond'",
    )


def intervals(conn: psycopg.Connection[Any]) -> int:
    return int(rows(conn, "SELECT count(*) FROM otel_jobsteps_partition")[0][0])


def test_children_exist_ahead_of_need_and_never_hold_an_open_step(
    layout_conn: psycopg.Connection[Any],
) -> None:
    # The current interval's children and the next one's.
    assert intervals(layout_conn) >= 2
    assert is_partitioned(layout_conn)
    (child,) = rows(
        layout_conn,
        "SELECT c.relname FROM otel_jobsteps_partition AS p"
        " JOIN pg_class AS c ON c.oid = p.job_event::regclass LIMIT 1",
    )[0]
    with pytest.raises(psycopg.errors.CheckViolation):
        layout_conn.execute(
            sql.SQL(
                "INSERT INTO {} (id, domain, job_id, type, step_key, step_status)"
                " VALUES (1, 'part', 'x', 'STEP', 'A', 'RUNNING')"
            ).format(sql.Identifier(child))
        )


def test_jobs_keep_their_guarantees_while_intervals_roll_over(
    layout_dsn: str, layout_conn: psycopg.Connection[Any]
) -> None:
    # Two executions run the same attempts at once (a zombie re-run), while prune keeps moving
    # finished attempts into their intervals: final rows race each other and the mover.
    workers = [Worker(layout_dsn) for _ in range(2)]
    stop = threading.Event()
    moved: list[int] = []
    errors: list[BaseException] = []

    def keep_moving() -> None:
        try:
            while not stop.is_set():
                prune(layout_dsn, KEEP_ALL, batch_size=20)
                moved.append(intervals(layout_conn))
        except BaseException as error:  # noqa: BLE001 - reported by the test below
            errors.append(error)

    ran: list[int] = []
    deadline = time.monotonic() + RUN_FOR_S

    def run_jobs(worker: Worker, index: int) -> None:
        number = 0
        try:
            while time.monotonic() < deadline:
                worker.run(f"job-{number}", execution=f"execution-{index}")
                if number % 3 == 0:
                    worker.run(f"job-{number}", attempts_made=1, execution=f"execution-{index}")
                number += 1
                if number % FLUSH_EVERY == 0:  # within the writer's pace: its queue is bounded
                    assert worker.processor.force_flush(30_000)
        except BaseException as error:  # noqa: BLE001 - reported by the test below
            errors.append(error)
        ran.append(number)

    mover = threading.Thread(target=keep_moving, name="mover")
    mover.start()
    runners = [
        threading.Thread(target=run_jobs, args=(worker, index), name=f"runner-{index}")
        for index, worker in enumerate(workers)
    ]
    for runner in runners:
        runner.start()
    for runner in runners:
        runner.join(120)
    stats = [worker.stop() for worker in workers]
    # Let at least one more boundary pass, then move what finished before it.
    first = rows(layout_conn, "SELECT now()")[0][0]
    wait_until(
        lambda: rows(layout_conn, "SELECT now() - %s > interval '1.1 s'", first)[0][0],
        what="the next interval",
    )
    stop.set()
    mover.join(60)
    prune(layout_dsn, KEEP_ALL)

    assert errors == []
    assert stats == [{}, {}]
    jobs = max(ran)
    attempts = jobs + (jobs + 2) // 3  # every third job has a second attempt
    assert rows(layout_conn, "SELECT count(*) FROM job_log") == [(attempts,)]
    assert rows(
        layout_conn, "SELECT count(DISTINCT (job_id, attempt)) FROM job_event WHERE type = 'STEP'"
    ) == [(attempts,)]
    assert rows(layout_conn, "SELECT count(*) FROM job_event WHERE ended_at IS NULL") == [(0,)]
    # The second execution's rows of an attempt can come after the attempt moved: they follow
    # it into their own interval's child (CHECK rows_before_upper_bound).
    assert misplaced(layout_conn) == []
    # Everything finished moved; several intervals were filled along the way.
    assert rows(layout_conn, "SELECT count(*) FROM ONLY job_event") == [(0,)]
    assert rows(layout_conn, "SELECT count(DISTINCT tableoid) >= 2 FROM job_event") == [(True,)]


def test_the_first_final_row_wins_after_its_attempt_moved(
    layout_dsn: str, layout_conn: psycopg.Connection[Any]
) -> None:
    worker = Worker(layout_dsn)
    worker.run("once")
    assert worker.processor.force_flush(10_000)

    def moved() -> bool:
        prune(layout_dsn, KEEP_ALL)
        return rows(layout_conn, "SELECT count(*) FROM ONLY job_event")[0][0] == 0

    wait_until(moved, what="the attempt moving into its interval")
    # The same attempt run again by another execution, failing this time, after its steps
    # moved: the first final row keeps winning, and the re-run's step stays with the current
    # rows until it too moves.
    with pytest.raises(RuntimeError):
        with job_attempt("part", "once", "render", execution="again", tracer=worker.tracer):
            raise RuntimeError("second run")
    worker.stop()
    assert rows(layout_conn, "SELECT status FROM job_log WHERE job_id = 'once'") == [("COMPLETED",)]


def test_prune_drops_whole_intervals_and_never_a_row_of_an_open_attempt(empty_dsn: str) -> None:
    migrate(empty_dsn, partition_interval=timedelta(days=1))
    conn = psycopg.connect(empty_dsn, autocommit=True)
    finished_attempt(conn, "late", 1, age="40 days")
    finished_attempt(conn, "done", 1, age="40 days 1 second")
    finished_attempt(conn, "older", 1, age="41 days")
    finished_attempt(conn, "recent", 1, age="1 day")
    prune(empty_dsn, KEEP_ALL)  # everything finished moves; nothing is old enough to go
    assert rows(conn, "SELECT count(*) FROM ONLY job_event") == [(0,)]
    open_step(conn, "late", age="3 days", key="REDO")  # a late step of a moved attempt

    result = prune(empty_dsn, timedelta(days=30))
    # "older" went with its whole interval; the interval of "late" stays (its attempt is open
    # again) and only "done", beside it, is deleted in a batch.
    assert (result.partitions, result.batches) == (1, 1)
    assert (result.job_logs, result.job_events) == (2, 4)
    assert counts(conn) == [("late", 1, 3), ("recent", 1, 2)]

    # Once the late step has closed it moves, into its own interval's child (it is newer than
    # its attempt's), the old interval goes whole and a batch deletes the rest of the attempt.
    conn.execute(
        "UPDATE job_event SET ended_at = now() - interval '2 days', step_status = 'COMPLETED'"
        " WHERE type = 'STEP' AND ended_at IS NULL"
    )
    result = prune(empty_dsn, timedelta(days=30))
    assert (result.partitions, result.job_logs, result.job_events) == (1, 1, 3)
    assert counts(conn) == [("recent", 1, 2)]
    conn.close()


def test_an_existing_install_converts_while_a_job_runs(empty_dsn: str) -> None:
    migrate(empty_dsn)
    worker = Worker(empty_dsn)
    for number in range(5):
        worker.run(f"before-{number}")
    with job_attempt("part", "spanning", "render", tracer=worker.tracer):
        with step("FETCH", tracer=worker.tracer):
            assert worker.processor.force_flush(10_000)
            before = [job_detail(empty_dsn, "part", f"before-{n}") for n in range(5)]

            # The documented way: the same command, with --partitioned, on the live install.
            env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_JOBSTEPS_")}
            command = ["migrate", "--partitioned", "--interval", "1s"]
            done = subprocess.run(
                [sys.executable, "-m", "otel_jobsteps.cli", "--dsn", empty_dsn, *command],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            assert "partitioned layout" in done.stdout

            with psycopg.connect(empty_dsn, autocommit=True) as conn:

                def moved() -> bool:
                    prune(empty_dsn, KEEP_ALL)
                    old = "SELECT count(*) FROM ONLY job_event WHERE job_id LIKE 'before-%%'"
                    return rows(conn, old)[0][0] == 0

                wait_until(moved, what="the old attempts moving into their interval")
                after = [job_detail(empty_dsn, "part", f"before-{n}") for n in range(5)]
                assert [(d.steps, d.log) for d in after if d] == [
                    (d.steps, d.log) for d in before if d
                ]
    for number in range(3):
        worker.run(f"after-{number}")
    assert worker.stop() == {}
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert rows(conn, "SELECT count(*) FROM job_log") == [(9,)]
        assert rows(conn, "SELECT count(*) FROM job_event WHERE ended_at IS NULL") == [(0,)]
        assert split_attempts(conn) == []


def test_the_writer_reads_no_moved_step(
    layout_dsn: str, layout_conn: psycopg.Connection[Any]
) -> None:
    # The planner skips the job_event children in every statement that looks for open steps
    # (CHECK closed_steps_only): no row of theirs is read. (The writer's startup probe, LIMIT 0,
    # counts a scan that reads nothing, hence rows read rather than scans.)
    for job in range(20):
        finished_attempt(layout_conn, f"moved-{job}", 1, age="2 days")
    prune(layout_conn, KEEP_ALL)  # on this session, so its own reads are counted before ours
    layout_conn.execute("SELECT pg_stat_force_next_flush()")
    events = [r[0] for r in rows(layout_conn, "SELECT job_event FROM otel_jobsteps_partition")]

    def reads() -> list[tuple[Any, ...]]:
        return rows(
            layout_conn,
            "SELECT relid::regclass::text, seq_tup_read, COALESCE(idx_tup_fetch, 0)"
            " FROM pg_stat_user_tables WHERE relid = ANY(%s::regclass[]) ORDER BY 1",
            events,
        )

    def writes_counted() -> bool:
        return bool(
            rows(
                layout_conn,
                "SELECT n_tup_ins >= 60 FROM pg_stat_user_tables"
                " WHERE relid = 'job_event'::regclass",
            )[0][0]
        )

    before = reads()
    assert len(before) == len(events) >= 3
    worker = Worker(layout_dsn)
    for number in range(30):
        worker.run(f"new-{number}")
    assert worker.stop() == {}
    # Statistics reach the shared counters when the writer's session ends.
    wait_until(writes_counted, what="the writer's statistics")
    assert reads() == before


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


def windowed_reads(schema: str) -> dict[str, tuple[sql.Composed, dict[str, Any]]]:
    """The read side's windowed statements as the package runs them, with their parameters
    (the window's start is added by the test)."""
    read = qualified_queries("read.sql", schema, (("in_domain", ""),))
    read_in_domain = qualified_queries(
        "read.sql", schema, (("in_domain", "AND domain = %(domain)s"),)
    )
    web = qualified_queries("web.sql", schema)
    jobs = {"domain": None, "job_type": None, "status": None, "limit": 50}
    return {
        "list_jobs": (read["list_jobs"], jobs),
        "list_jobs_in_domain": (read_in_domain["list_jobs"], {**jobs, "domain": "render"}),
        "jobs_page": (
            web["jobs_page"],
            {**jobs, "before_at": None, "before_domain": None, "before_job_id": None},
        ),
        "step_stats": (web["step_stats"], {}),
        "step_failures": (
            web["step_failures"],
            {"job_type": None, "step_key": "SAVE", "limit": 50},
        ),
    }


def children_read_by_window(
    conn: psycopg.Connection[Any], query: sql.Composed, params: dict[str, Any]
) -> tuple[set[str], set[str]]:
    """(children in the plan, children scanned with the window's condition) of the statement
    planned as the package runs it: the window's start a value, planned for it."""
    with conn.transaction():
        since_at = window_start(conn, timedelta(hours=1))
        explain = sql.SQL("EXPLAIN (FORMAT JSON) ") + query
        ((plan,),) = conn.execute(explain, {**params, "since_at": since_at}, prepare=False)
    named, windowed = set(), set()
    for node in plan_nodes(plan[0]["Plan"]):
        relation = node.get("Relation Name", "")
        if relation.startswith("job_event_p"):
            named.add(relation)
            conditions = " ".join(
                str(node.get(key, "")) for key in ("Index Cond", "Filter", "Recheck Cond")
            )
            if "COALESCE(" in conditions:
                windowed.add(relation)
    return named, windowed


def test_a_window_reads_no_child_older_than_it(empty_dsn: str) -> None:
    # Each child's CHECK rows_before_upper_bound contradicts a window starting after its
    # interval, once the window's start is a value in the plan: every windowed read of the
    # package skips those children (reads by job id, as the jobs' latest attempts, still probe
    # each one: a layout by time cannot know where a job's rows are).
    migrate(empty_dsn, partition_interval=timedelta(days=1))
    conn = psycopg.connect(empty_dsn, autocommit=True)
    for days in (10, 5, 2):
        finished_attempt(conn, f"old-{days}", 1, age=f"{days} days")
    finished_attempt(conn, "recent", 1, age="1 minute")
    prune(empty_dsn, KEEP_ALL)
    old = {
        child.split(".")[-1].strip('"')
        for (child,) in rows(
            conn,
            "SELECT p.job_event FROM otel_jobsteps_partition AS p"
            " WHERE p.upper_bound <= now() - interval '1 hour'"
            " AND EXISTS (SELECT 1 FROM job_event_archive AS e"
            "             WHERE e.tableoid = p.job_event::regclass)",
        )
    }
    assert len(old) == 3
    statements = windowed_reads("public")
    for name, (query, params) in statements.items():
        named, windowed = children_read_by_window(conn, query, params)
        assert windowed & old == set(), name
        if name.startswith("step_"):  # nothing but the window: no old child at all
            assert named & old == set(), name

    # A child made by an earlier version gets the CHECK NOT VALID when `migrate --partitioned`
    # runs again: the planner ignores it until prune has validated it.
    five_days = rows(
        conn, "SELECT DISTINCT tableoid::regclass::text FROM job_event WHERE job_id = 'old-5'"
    )[0][0]
    conn.execute(
        sql.SQL("ALTER TABLE {} DROP CONSTRAINT rows_before_upper_bound").format(
            sql.Identifier(five_days)
        )
    )
    # An earlier version placed attempts by their final row: a late row newer than the child.
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (id, domain, job_id, attempt, type, created_at)"
            " VALUES (1000000000, 'render', 'old-5', 1, 'LOG', now() - interval '1 day')"
        ).format(sql.Identifier(five_days))
    )
    migrate(empty_dsn, partition_interval=timedelta(days=1))
    query, params = statements["step_failures"]
    assert five_days in children_read_by_window(conn, query, params)[0]
    prune(empty_dsn, KEEP_ALL)
    assert five_days not in children_read_by_window(conn, query, params)[0]
    conn.close()
