"""The read side on a real PostgreSQL: job_detail, list_jobs, the views, and tail's follower."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from otel_jobsteps import (
    ConfigurationError,
    DatabaseUnavailableError,
    JobDetail,
    SchemaNotMigratedError,
    job_attempt,
    job_detail,
    list_jobs,
    progress,
    record_event,
    record_job_event,
    step,
)
from otel_jobsteps.query import ActivityFollower
from otel_jobsteps.sql import qualified_queries
from tests.helpers import TracingFactory, job_rows_read, rows
from tests.web.support import retried_job


def detail_of(
    dsn: str, job_id: str, attempt: int | None = None, domain: str = "render"
) -> JobDetail:
    detail = job_detail(dsn, domain, job_id, attempt)
    assert detail is not None
    return detail


def test_latest_attempt_in_detail(dsn: str, two_attempts: str) -> None:
    detail = detail_of(dsn, two_attempts)

    assert (detail.domain, detail.job_id, detail.job_type) == ("render", "42", "thumbnail")
    assert detail.current_attempt == 2
    assert [(a.attempt, a.status, a.reason, a.last_step) for a in detail.attempts] == [
        (1, "FAILED", "error", "SAVE"),
        (2, "COMPLETED", None, "SAVE"),
    ]
    assert detail.attempts[0].error == "OSError: disk full"
    for summary in detail.attempts:
        assert summary.started_at is not None
        assert summary.ended_at is not None
        assert summary.started_at <= summary.ended_at
        assert summary.open_step is None
    assert [(s.key, s.status) for s in detail.steps] == [
        ("RENDER", "COMPLETED"),
        ("SAVE", "COMPLETED"),
    ]
    render = detail.steps[0]
    assert render.detail == {"pct": 100, "frames": 300}
    assert render.ended_at is not None
    assert render.duration == render.ended_at - render.started_at
    assert detail.log is not None
    assert (detail.log.attempt, detail.log.status, detail.log.reason) == (2, "COMPLETED", None)


def test_events_apart_from_steps_and_stalled_counted_per_job(dsn: str, two_attempts: str) -> None:
    detail = detail_of(dsn, two_attempts)

    assert [(e.attempt, e.type, e.message, e.detail) for e in detail.events] == [
        (1, "STALLED", "worker lost its lock", {"worker": "w1"}),
        (1, "RETRY_SCHEDULED", "retry after: disk full", None),
        (2, "STALLED", "worker lost its lock", {"worker": "w1"}),
    ]
    assert detail.stalled_count == 2
    assert [a.stalled_count for a in detail.attempts] == [1, 1]


def test_processing_start_is_the_chosen_attempts_first_step(dsn: str, two_attempts: str) -> None:
    latest = detail_of(dsn, two_attempts)
    first = detail_of(dsn, two_attempts, attempt=1)

    assert latest.processing_started_at == latest.steps[0].started_at
    assert first.processing_started_at == first.steps[0].started_at
    assert first.processing_started_at < latest.processing_started_at
    assert latest.attempt.processing_started_at == latest.processing_started_at


def test_asked_attempt_has_its_own_steps_and_log(dsn: str, two_attempts: str) -> None:
    detail = detail_of(dsn, two_attempts, attempt=1)

    assert detail.current_attempt == 1
    assert [(s.key, s.status, s.message) for s in detail.steps] == [
        ("RENDER", "COMPLETED", None),
        ("SAVE", "FAILED", "OSError: disk full"),
    ]
    assert detail.log is not None
    assert (detail.log.status, detail.log.reason) == ("FAILED", "error")
    assert detail.log.detail == {"step": "SAVE", "error": "OSError: disk full"}
    assert len(detail.events) == 3  # events cover every attempt


def test_unknown_job_or_attempt_is_none(dsn: str, two_attempts: str) -> None:
    assert job_detail(dsn, "render", "nope") is None
    assert job_detail(dsn, "other-domain", two_attempts) is None
    assert job_detail(dsn, "render", two_attempts, 3) is None


def test_open_step_reads_as_running(tracing: TracingFactory, dsn: str) -> None:
    tracer, processor = tracing()
    with job_attempt("render", 7, "thumbnail", tracer=tracer), step("RENDER", tracer=tracer):
        progress(pct=10)
        assert processor.force_flush(10_000)
        detail = detail_of(dsn, "7")

    (summary,) = detail.attempts
    assert (summary.status, summary.open_step, summary.last_step) == ("RUNNING", "RENDER", "RENDER")
    assert summary.ended_at is None
    (running,) = detail.steps
    assert (running.status, running.ended_at, running.duration) == ("RUNNING", None, None)
    assert running.detail == {"pct": 10}
    assert detail.log is None
    assert detail.as_of >= running.started_at


def test_job_with_an_event_and_no_step(tracing: TracingFactory, dsn: str) -> None:
    tracer, processor = tracing()
    record_job_event("render", "8", "STALLED", "waited too long", tracer=tracer, queue="q1")
    assert processor.force_flush(10_000)

    detail = detail_of(dsn, "8")
    assert [(a.attempt, a.status, a.last_step) for a in detail.attempts] == [(1, "RUNNING", None)]
    assert detail.steps == ()
    assert detail.processing_started_at is None
    assert detail.attempts[0].started_at == detail.events[0].created_at
    assert [(e.type, e.message, e.detail) for e in detail.events] == [
        ("STALLED", "waited too long", {"queue": "q1"})
    ]
    assert detail.stalled_count == 1


def test_plain_sql_event_naming_only_scope_type_and_message(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    conn.execute(
        "INSERT INTO job_event (domain, job_id, type, message)"
        " VALUES ('render', '9', 'STALLED', 'seen by the queue watcher')"
    )
    detail = detail_of(dsn, "9")

    assert detail.job_type is None
    assert detail.current_attempt == 1
    assert [(e.attempt, e.type, e.message, e.detail) for e in detail.events] == [
        (1, "STALLED", "seen by the queue watcher", None)
    ]
    assert detail.stalled_count == 1
    assert detail.steps == ()


def test_step_rows_are_never_counted_as_stalled(dsn: str, conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO job_event (domain, job_id, type, step_key, step_status, ended_at)"
        " VALUES ('render', '10', 'STEP', 'STALLED', 'COMPLETED', now()),"
        "        ('render', '10', 'STEP', 'SAVE', 'RUNNING', NULL)"
    )
    conn.execute(
        "INSERT INTO job_event (domain, job_id, type) VALUES ('render', '10', 'STALLED'),"
        " ('render', '10', 'RETRY_SCHEDULED')"
    )
    detail = detail_of(dsn, "10")

    assert detail.stalled_count == 1
    assert [e.type for e in detail.events] == ["STALLED", "RETRY_SCHEDULED"]
    assert [s.key for s in detail.steps] == ["STALLED", "SAVE"]


def test_to_dict_is_json_ready(dsn: str, two_attempts: str) -> None:
    data = json.loads(json.dumps(detail_of(dsn, two_attempts).to_dict()))

    assert data["current_attempt"] == 2
    assert [a["status"] for a in data["attempts"]] == ["FAILED", "COMPLETED"]
    assert [s["key"] for s in data["steps"]] == ["RENDER", "SAVE"]
    assert isinstance(data["steps"][0]["duration"], float)
    assert datetime.fromisoformat(data["processing_started_at"]).tzinfo is not None
    assert data["log"]["status"] == "COMPLETED"
    assert data["stalled_count"] == 2
    assert data["events"][0]["attempt"] == 1


def test_caller_connection_is_used_and_left_open(dsn: str, two_attempts: str) -> None:
    with psycopg.connect(dsn) as conn:  # not autocommit: reads join the caller's transaction
        conn.execute("SELECT 1")
        detail = job_detail(conn, "render", two_attempts)
        jobs = list_jobs(conn)
        assert detail is not None
        assert [j.job_id for j in jobs] == ["42"]
        assert not conn.closed
        assert conn.execute("SELECT 2").fetchone() == (2,)


def test_not_migrated_schema_says_run_migrate(empty_dsn: str) -> None:
    with pytest.raises(SchemaNotMigratedError, match="otel-jobsteps migrate"):
        job_detail(empty_dsn, "render", "42")
    with pytest.raises(SchemaNotMigratedError, match="otel-jobsteps migrate"):
        list_jobs(empty_dsn, schema="no_such_schema")


def test_unreachable_database_message_hides_the_password() -> None:
    with pytest.raises(DatabaseUnavailableError) as caught:
        job_detail("postgresql://u:s3cret@127.0.0.1:1/x", "render", "42")
    assert "s3cret" not in str(caught.value)


# -- list_jobs -------------------------------------------------------------------------------


def insert_attempt(
    conn: psycopg.Connection[Any],
    job_id: str,
    attempt: int,
    *,
    status: str | None,
    age: str = "1 minute",
    domain: str = "render",
    job_type: str = "thumbnail",
) -> None:
    """One closed step (or an open one when ``status`` is None) and the attempt's final row,
    ``age`` before now."""
    params = {
        "domain": domain,
        "job_id": job_id,
        "job_type": job_type,
        "attempt": attempt,
        "status": status,
        "age": age,
    }
    conn.execute(
        """INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,
                                  message, created_at, ended_at)
           SELECT %(domain)s, %(job_id)s, %(job_type)s, %(attempt)s, 'STEP', 'SAVE',
                  COALESCE(status, 'RUNNING'),
                  CASE WHEN status = 'FAILED' THEN 'OSError: disk full' END,
                  at, CASE WHEN status IS NOT NULL THEN at END
           FROM (SELECT %(status)s::text, now() - %(age)s::interval) AS t (status, at)""",
        params,
    )
    if status is not None:
        conn.execute(
            """INSERT INTO job_log (domain, job_id, job_type, attempt, status, reason, detail,
                                    created_at)
               VALUES (%(domain)s, %(job_id)s, %(job_type)s, %(attempt)s, %(status)s,
                       CASE WHEN %(status)s = 'FAILED' THEN 'error' END,
                       '{"step": "SAVE"}', now() - %(age)s::interval)""",
            params,
        )


@pytest.fixture
def several_jobs(conn: psycopg.Connection[Any]) -> psycopg.Connection[Any]:
    insert_attempt(conn, "retried", 1, status="FAILED", age="50 minutes")
    insert_attempt(conn, "retried", 2, status="COMPLETED", age="40 minutes")
    insert_attempt(conn, "failed", 1, status="FAILED", age="30 minutes")
    insert_attempt(conn, "running", 1, status=None, age="20 minutes")
    insert_attempt(conn, "old-failure", 1, status="FAILED", age="2 days")
    insert_attempt(conn, "video", 1, status="FAILED", age="10 minutes", job_type="transcode")
    insert_attempt(conn, "elsewhere", 1, status="COMPLETED", age="5 minutes", domain="mail")
    return conn


def test_list_jobs_latest_attempt_each_newest_first(dsn: str, several_jobs: Any) -> None:
    jobs = list_jobs(dsn)

    assert [(j.domain, j.job_id, j.attempt, j.status) for j in jobs] == [
        ("mail", "elsewhere", 1, "COMPLETED"),
        ("render", "video", 1, "FAILED"),
        ("render", "running", 1, "RUNNING"),
        ("render", "failed", 1, "FAILED"),
        ("render", "retried", 2, "COMPLETED"),
        ("render", "old-failure", 1, "FAILED"),
    ]
    running = jobs[2]
    assert (running.open_step, running.ended_at, running.reason) == ("SAVE", None, None)


def test_what_failed_in_the_last_hour(dsn: str, several_jobs: Any) -> None:
    jobs = list_jobs(dsn, status="FAILED", since=timedelta(hours=1))

    assert [j.job_id for j in jobs] == ["video", "failed"]  # not retried, not 2 days old
    assert [(j.reason, j.last_step) for j in jobs] == [("error", "SAVE"), ("error", "SAVE")]


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        pytest.param({"domain": "mail"}, ["elsewhere"], id="domain"),
        pytest.param({"job_type": "transcode"}, ["video"], id="job-type"),
        pytest.param({"status": "RUNNING"}, ["running"], id="running"),
        pytest.param({"limit": 2}, ["elsewhere", "video"], id="limit"),
        pytest.param(
            {"since": timedelta(minutes=25)}, ["elsewhere", "video", "running"], id="since"
        ),
        pytest.param(
            {"domain": "render", "since": timedelta(minutes=25)},
            ["video", "running"],
            id="domain-since",
        ),
    ],
)
def test_list_jobs_filters(
    dsn: str, several_jobs: Any, filters: dict[str, Any], expected: list[str]
) -> None:
    assert [j.job_id for j in list_jobs(dsn, **filters)] == expected


def test_list_jobs_since_a_datetime(dsn: str, several_jobs: psycopg.Connection[Any]) -> None:
    (row,) = rows(several_jobs, "SELECT now() - interval '15 minutes'")
    assert [j.job_id for j in list_jobs(dsn, since=row[0])] == ["elsewhere", "video"]


@pytest.mark.parametrize("domain", [None, "render"], ids=["any-domain", "one-domain"])
def test_list_jobs_since_counts_a_heartbeat_of_an_old_open_step(
    dsn: str, conn: psycopg.Connection[Any], domain: str | None
) -> None:
    conn.execute(
        "INSERT INTO job_event (domain, job_id, attempt, type, step_key, step_status,"
        " created_at, heartbeat_at)"
        " SELECT 'render', job_id, 1, 'STEP', 'SAVE', 'RUNNING', now() - interval '3 hours',"
        "        now() - beat"
        " FROM (VALUES ('beating', interval '1 minute'), ('silent', interval '2 hours'),"
        "              ('never', NULL)) AS t (job_id, beat)"
    )
    jobs = list_jobs(dsn, domain=domain, since=timedelta(hours=1))

    assert [(j.job_id, j.status, j.open_step) for j in jobs] == [("beating", "RUNNING", "SAVE")]
    assert [j.job_id for j in list_jobs(dsn, domain=domain)] == ["beating", "silent", "never"]


@pytest.mark.parametrize(
    "filters",
    [
        pytest.param({}, id="all"),
        pytest.param({"domain": "render", "since": timedelta(minutes=25)}, id="domain-since"),
        pytest.param({"status": "FAILED", "since": timedelta(hours=1)}, id="status-since"),
    ],
)
def test_list_jobs_generic_plan_reads_the_same(
    dsn: str, several_jobs: Any, filters: dict[str, Any]
) -> None:
    with psycopg.connect(dsn, options="-c plan_cache_mode=force_generic_plan") as generic:
        assert list_jobs(generic, **filters) == list_jobs(dsn, **filters)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param({"status": "DONE"}, id="status"),
        pytest.param({"limit": 0}, id="limit"),
    ],
)
def test_list_jobs_rejects_bad_arguments(dsn: str, bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        list_jobs(dsn, **bad)


# -- views -----------------------------------------------------------------------------------


def test_current_attempt_view(several_jobs: psycopg.Connection[Any]) -> None:
    assert rows(
        several_jobs,
        "SELECT job_id, attempt, status, open_step FROM job_current_attempt"
        " WHERE domain = 'render' ORDER BY job_id",
    ) == [
        ("failed", 1, "FAILED", None),
        ("old-failure", 1, "FAILED", None),
        ("retried", 2, "COMPLETED", None),
        ("running", 1, "RUNNING", "SAVE"),
        ("video", 1, "FAILED", None),
    ]


def test_step_duration_view(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,"
        " created_at, ended_at)"
        " SELECT 'render', n::text, 'thumbnail', 1, 'STEP', 'RENDER',"
        "        CASE WHEN n = 3 THEN 'FAILED' ELSE 'COMPLETED' END,"
        "        timestamptz '2024-01-01', timestamptz '2024-01-01' + n * interval '1 second'"
        " FROM generate_series(1, 3) AS n"
    )
    conn.execute(
        "INSERT INTO job_event (domain, job_id, job_type, type, step_key, step_status)"
        " VALUES ('render', '4', 'thumbnail', 'STEP', 'RENDER', 'RUNNING')"
    )
    assert rows(
        conn,
        "SELECT job_type, step_key, steps, failed, avg_seconds, p50_seconds, max_seconds"
        " FROM job_step_duration",
    ) == [("thumbnail", "RENDER", 3, 1, 2.0, 2.0, 3.0)]


# -- tail ------------------------------------------------------------------------------------


@pytest.fixture(params=["auto", "force_generic_plan"])
def follow_conn(request: pytest.FixtureRequest, dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection for the follower, planning its polls as usual or always generically (what
    a prepared statement may fall back to)."""
    options = f"-c plan_cache_mode={request.param}"
    with psycopg.connect(dsn, autocommit=True, options=options) as connection:
        yield connection


def test_follower_sees_new_rows_and_closes(
    tracing: TracingFactory, dsn: str, follow_conn: psycopg.Connection[Any]
) -> None:
    conn = follow_conn
    tracer, processor = tracing()
    follower = ActivityFollower(conn)
    assert follower.poll() == []

    with job_attempt("render", "11", "thumbnail", tracer=tracer):
        with step("RENDER", tracer=tracer):
            assert processor.force_flush(10_000)
            assert [(a.change, a.step_key) for a in follower.poll()] == [("started", "RENDER")]
            assert follower.open_steps == 1
        record_event("RETRY_SCHEDULED", "later", tracer=tracer)
    assert processor.force_flush(10_000)

    seen = [(a.change, a.type, a.step_key, a.step_status) for a in follower.poll()]
    assert seen == [
        ("ended", "STEP", "RENDER", "COMPLETED"),
        ("event", "RETRY_SCHEDULED", None, None),
    ]
    assert follower.open_steps == 0
    assert follower.poll() == []


def test_follower_sees_a_row_committed_after_a_later_one(
    dsn: str, follow_conn: psycopg.Connection[Any]
) -> None:
    conn = follow_conn
    follower = ActivityFollower(conn, domain="render")
    insert = (
        "INSERT INTO job_event (domain, job_id, type, message) VALUES ('render', %s, 'LOG', %s)"
    )
    with psycopg.connect(dsn) as slow:  # holds its id, uncommitted
        slow.execute(insert, ("12", "first id"))
        conn.execute(insert, ("12", "second id"))
        assert [a.message for a in follower.poll()] == ["second id"]
        slow.commit()
    assert [a.message for a in follower.poll()] == ["first id"]
    conn.execute(insert.replace("'render'", "'mail'"), ("13", "other domain"))
    assert follower.poll() == []


def test_follower_pages_through_a_burst_in_id_order(
    conn: psycopg.Connection[Any], follow_conn: psycopg.Connection[Any]
) -> None:
    follower = ActivityFollower(follow_conn, batch_size=2)
    conn.execute(
        "INSERT INTO job_event (domain, job_id, type, message)"
        " SELECT 'render', '14', 'LOG', 'row ' || n FROM generate_series(1, 5) AS n"
    )
    conn.execute(
        "INSERT INTO job_event (domain, job_id, type, step_key, step_status)"
        " VALUES ('render', '14', 'STEP', 'SAVE', 'RUNNING')"
    )

    polls = [[(a.change, a.message or a.step_key) for a in follower.poll()] for _ in range(4)]
    assert polls == [
        [("log", "row 1"), ("log", "row 2")],  # LOG rows are log lines to the follower
        [("log", "row 3"), ("log", "row 4")],
        [("log", "row 5"), ("started", "SAVE")],
        [],
    ]
    conn.execute("UPDATE job_event SET ended_at = now(), step_status = 'COMPLETED'")
    assert [(a.change, a.step_status) for a in follower.poll()] == [("ended", "COMPLETED")]
    assert follower.open_steps == 0


def _plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _plan_nodes(child)


def _rows_read(conn: psycopg.Connection[Any], statement: Any, params: dict[str, Any]) -> int:
    """Rows ``statement`` read from the job tables (index fetches and scans)."""
    with conn.transaction():
        return job_rows_read(conn, lambda: conn.execute(statement, params))


def test_a_job_retried_10000_times_is_read_per_attempt_before_any_analyze(
    conn: psycopg.Connection[Any],
) -> None:
    """Issue 36 item 3: on tables never analyzed (a fresh install) the planner took one row
    for a job and joined the view's attempts to their final rows by a filter, every attempt
    against every other (4.6 s for this job). The page's and job_detail's reads, planned so,
    reach each table through indexes and join per attempt (no Join Filter); the latest attempt
    of a listed job reads that attempt's rows only."""
    for table in ("job_event", "job_log"):  # no ANALYZE while the test runs either
        conn.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(
            sql.Identifier(table)))  # fmt: skip
    retried_job(conn, 10_000)
    never = "SELECT count(*) FROM pg_stat_user_tables WHERE relname IN ('job_event', 'job_log')"
    assert conn.execute(never + " AND analyze_count + autoanalyze_count = 0").fetchone() == (2,)
    read = qualified_queries("read.sql", "public", (("in_domain", ""),))
    key = {"domain": "mail", "job_id": "retried"}
    listed = [1, *range(1000, 10_000, 1000), *range(9981, 10_001)]
    planned = {
        "job_attempt_choice": {**key, "attempt": 5000, "before": 9981, "newest": 20, "failed": 20},
        "job_attempts": {**key, "attempts": listed},
        "job_events": {**key, "attempts": listed},
        "job_stalled": key,
    }
    for name, params in planned.items():
        (found,) = conn.execute(sql.SQL("EXPLAIN (FORMAT JSON) ") + read[name], params).fetchone()
        nodes = list(_plan_nodes(found[0]["Plan"]))
        scans = [n for n in nodes if n.get("Relation Name") in ("job_event", "job_log")]
        assert scans, name
        assert all(n["Node Type"] != "Seq Scan" for n in scans), name
        assert all("Join Filter" not in n for n in nodes), name

    latest = "SELECT attempt, status FROM job_latest_attempt(%(domain)s, %(job_id)s)"
    assert conn.execute(latest, key).fetchall() == [(10_000, "RUNNING")]
    assert _rows_read(conn, latest, key) <= 10  # was every row of the job: 29,999 and 9,999
