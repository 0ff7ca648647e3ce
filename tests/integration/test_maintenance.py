"""sweep and prune on a real PostgreSQL: they act on silent or old rows, never on live ones."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from otel_jobsteps import ConfigurationError, job_attempt, prune, step, sweep
from otel_jobsteps.maintenance import PruneResult
from otel_jobsteps.schema import is_partitioned
from tests.helpers import TracingFactory, counts, finished_attempt, open_step, rows

HOUR = timedelta(hours=1)


def step_rows(conn: psycopg.Connection[Any], job_id: str) -> list[tuple[Any, ...]]:
    return rows(
        conn,
        "SELECT attempt, step_key, step_status, message, ended_at IS NULL FROM job_event"
        " WHERE job_id = %s AND type = 'STEP' ORDER BY id",
        job_id,
    )


def log_rows(conn: psycopg.Connection[Any], job_id: str) -> list[tuple[Any, ...]]:
    return rows(
        conn,
        "SELECT attempt, status, reason, detail FROM job_log WHERE job_id = %s ORDER BY attempt",
        job_id,
    )


# -- sweep -----------------------------------------------------------------------------------


def test_sweep_closes_silent_steps_and_spares_live_ones(
    tracing: TracingFactory, dsn: str, conn: psycopg.Connection[Any]
) -> None:
    tracer, processor = tracing()
    open_step(conn, "silent", age="3 hours")
    open_step(conn, "beating", age="3 hours", heartbeat_age="1 minute")
    with job_attempt("render", "live", "thumbnail", tracer=tracer):
        with step("RENDER", tracer=tracer):
            assert processor.force_flush(10_000)
            swept = sweep(dsn, HOUR)
            assert step_rows(conn, "live") == [(1, "RENDER", "RUNNING", None, True)]
    assert processor.force_flush(10_000)

    assert [(s.job_id, s.attempt, s.step_key, s.writes_job_log) for s in swept] == [
        ("silent", 1, "SAVE", True)
    ]
    assert swept[0].last_seen_at == swept[0].started_at
    assert step_rows(conn, "silent") == [(1, "SAVE", "FAILED", "abandoned", False)]
    assert rows(conn, "SELECT ended_at = created_at FROM job_event WHERE job_id = 'silent'") == [
        (True,)
    ]
    assert log_rows(conn, "silent") == [(1, "FAILED", "abandoned", {"step": "SAVE"})]
    assert step_rows(conn, "beating") == [(1, "SAVE", "RUNNING", None, True)]
    # The live execution went on and closed its own step.
    assert step_rows(conn, "live") == [(1, "RENDER", "COMPLETED", None, False)]
    assert log_rows(conn, "live") == [(1, "COMPLETED", None, None)]


def test_sweep_ends_a_step_at_its_last_heartbeat(dsn: str, conn: psycopg.Connection[Any]) -> None:
    open_step(conn, "stopped", age="5 hours", heartbeat_age="2 hours")
    (swept,) = sweep(dsn, HOUR)

    assert swept.last_seen_at > swept.started_at
    assert rows(conn, "SELECT ended_at = heartbeat_at FROM job_event WHERE job_id = 'stopped'") == [
        (True,)
    ]
    assert rows(conn, "SELECT created_at = %s FROM job_log", swept.last_seen_at) == [(True,)]


def test_sweep_keeps_an_existing_final_row(dsn: str, conn: psycopg.Connection[Any]) -> None:
    open_step(conn, "logged", age="3 hours")
    conn.execute(
        "INSERT INTO job_log (domain, job_id, attempt, status) VALUES ('render', 'logged', 1,"
        " 'COMPLETED')"
    )
    (swept,) = sweep(dsn, HOUR)

    assert not swept.writes_job_log
    assert step_rows(conn, "logged") == [(1, "SAVE", "FAILED", "abandoned", False)]
    assert log_rows(conn, "logged") == [(1, "COMPLETED", None, None)]


def test_sweep_dry_run_changes_nothing(dsn: str, conn: psycopg.Connection[Any]) -> None:
    open_step(conn, "silent", age="3 hours")
    preview = sweep(dsn, HOUR, dry_run=True)

    assert [(s.job_id, s.step_key, s.writes_job_log) for s in preview] == [("silent", "SAVE", True)]
    assert step_rows(conn, "silent") == [(1, "SAVE", "RUNNING", None, True)]
    assert log_rows(conn, "silent") == []
    assert sweep(dsn, HOUR) == preview  # the preview said exactly what the sweep does


def closed_step(
    conn: psycopg.Connection[Any], job_id: str, *, age: str, heartbeat_age: str | None = None
) -> None:
    """A STEP row closed ``age`` ago (its attempt going on between steps, or dead)."""
    conn.execute(
        "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,"
        " execution_id, created_at, ended_at, heartbeat_at)"
        " VALUES ('render', %s, 'thumbnail', 1, 'STEP', 'FETCH', 'COMPLETED', 'worker-1',"
        " now() - %s::interval - interval '1 minute', now() - %s::interval,"
        " now() - %s::interval)",
        (job_id, age, age, heartbeat_age),
    )


def test_sweep_settles_attempts_silent_between_steps(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    closed_step(conn, "died-between", age="3 hours")
    closed_step(conn, "pausing", age="3 hours", heartbeat_age="1 minute")  # alive, beating
    closed_step(conn, "just-closed", age="1 minute")
    closed_step(conn, "finished", age="3 hours")
    conn.execute(
        "INSERT INTO job_log (domain, job_id, attempt, status) VALUES ('render', 'finished', 1,"
        " 'COMPLETED')"
    )
    preview = sweep(dsn, HOUR, dry_run=True)
    assert log_rows(conn, "died-between") == []
    swept = sweep(dsn, HOUR)

    assert swept == preview
    assert [(s.job_id, s.step_key, s.closes_step, s.writes_job_log) for s in swept] == [
        ("died-between", "FETCH", False, True)
    ]
    assert log_rows(conn, "died-between") == [(1, "FAILED", "abandoned", {"step": "FETCH"})]
    # Dated at its last sign of life: the step's end.
    assert rows(
        conn,
        "SELECT l.created_at = e.ended_at FROM job_log l JOIN job_event e USING (job_id)"
        " WHERE job_id = 'died-between'",
    ) == [(True,)]
    for job_id in ("pausing", "just-closed"):
        assert log_rows(conn, job_id) == []
    assert log_rows(conn, "finished") == [(1, "COMPLETED", None, None)]
    assert sweep(dsn, HOUR) == []


@pytest.mark.parametrize("older_than", [timedelta(0), timedelta(seconds=-5)])
def test_sweep_needs_a_positive_duration(dsn: str, older_than: timedelta) -> None:
    with pytest.raises(ConfigurationError):
        sweep(dsn, older_than)


# -- prune -----------------------------------------------------------------------------------


def assert_pruned(
    conn: psycopg.Connection[Any], result: PruneResult, logs: int, events: int, batches: int
) -> None:
    """The rows prune deleted; and how: in ``batches``, or (partitioned layout) by dropping
    whole intervals, where batches are for the interval at the edge only."""
    assert (result.job_logs, result.job_events) == (logs, events)
    if is_partitioned(conn):
        assert result.partitions >= 1
        assert result.batches <= batches
    else:
        assert (result.batches, result.partitions) == (batches, 0)


def test_prune_deletes_old_attempts_and_keeps_open_steps(
    tracing: TracingFactory, dsn: str, conn: psycopg.Connection[Any]
) -> None:
    tracer, processor = tracing()
    finished_attempt(conn, "old", 1, age="40 days")
    finished_attempt(conn, "recent", 1, age="1 day")
    finished_attempt(conn, "reopened", 1, age="40 days")
    open_step(conn, "reopened", age="1 minute", key="REDO")  # an execution of attempt 1 again
    conn.execute(
        "INSERT INTO job_event (domain, job_id, type, created_at)"
        " VALUES ('render', 'no-log', 'STALLED', now() - interval '90 days')"
    )
    with job_attempt("render", "old", "thumbnail", 1, tracer=tracer):
        with step("RENDER", tracer=tracer):
            assert processor.force_flush(10_000)
            result = prune(dsn, timedelta(days=30))
            assert step_rows(conn, "old") == [(2, "RENDER", "RUNNING", None, True)]
    assert processor.force_flush(10_000)

    assert_pruned(conn, result, 1, 2, batches=1)
    assert counts(conn) == [
        ("no-log", 1, 1),
        ("old", 2, 1),
        ("recent", 1, 2),
        ("reopened", 1, 3),
    ]
    assert rows(conn, "SELECT job_id, attempt FROM job_log ORDER BY job_id") == [
        ("old", 2),  # the live attempt finished after the prune
        ("recent", 1),
        ("reopened", 1),
    ]


def test_prune_works_in_batches(dsn: str, conn: psycopg.Connection[Any]) -> None:
    for job in ("a", "b", "c"):
        finished_attempt(conn, job, 1, age="40 days")
    finished_attempt(conn, "d", 1, age="2 days")

    preview = prune(dsn, timedelta(days=30), dry_run=True, batch_size=1)
    assert (preview.job_logs, preview.job_events, preview.dry_run) == (3, 6, True)
    assert len(counts(conn)) == 4

    result = prune(dsn, timedelta(days=30), batch_size=1)
    assert_pruned(conn, result, 3, 6, batches=3)
    assert counts(conn) == [("d", 1, 2)]
    assert prune(dsn, timedelta(days=30)).job_logs == 0


def test_prune_dry_run_only_reads(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """A preview works where nothing can be written (a replica, a SELECT-only role) and
    counts what the real run then deletes, sparing an attempt that still has an open step."""
    finished_attempt(conn, "old", 1, age="40 days")
    finished_attempt(conn, "kept", 1, age="40 days")
    open_step(conn, "kept", age="1 day")  # a late step of a finished attempt
    with psycopg.connect(dsn, options="-c default_transaction_read_only=on") as read_only:
        preview = prune(read_only, timedelta(days=30), dry_run=True)
    assert (preview.job_logs, preview.job_events) == (1, 2)
    result = prune(dsn, timedelta(days=30))
    assert (result.job_logs, result.job_events) == (preview.job_logs, preview.job_events)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param({"older_than": timedelta(0)}, id="older-than"),
        pytest.param({"older_than": HOUR, "batch_size": 0}, id="batch-size"),
    ],
)
def test_prune_rejects_bad_arguments(dsn: str, bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        prune(dsn, **bad)


@pytest.mark.parametrize("plan", ["auto", "force_generic_plan"])
def test_prune_batches_walk_past_a_kept_attempt(
    dsn: str, conn: psycopg.Connection[Any], plan: str
) -> None:
    for days, job in enumerate("abcde", start=40):
        finished_attempt(conn, job, 1, age=f"{days} days")
    open_step(conn, "c", age="1 minute", key="REDO")  # keeps attempt c/1 whole

    with psycopg.connect(dsn, options=f"-c plan_cache_mode={plan}") as planned:
        preview = prune(planned, timedelta(days=30), dry_run=True, batch_size=2)
        result = prune(planned, timedelta(days=30), batch_size=2)

    assert (preview.job_logs, preview.job_events) == (4, 8)
    assert_pruned(conn, result, 4, 8, batches=2)
    assert counts(conn) == [("c", 1, 3)]
    assert rows(conn, "SELECT job_id FROM job_log") == [("c",)]


def test_prune_forgets_collects_old_settled_attempts_only(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    conn.execute(
        "INSERT INTO otlp_attempt (domain, job_id, attempt, settled, touched_at) VALUES"
        " ('d', 'old-settled', 1, true, now() - interval '40 days'),"
        " ('d', 'new-settled', 1, true, now() - interval '1 day'),"
        " ('d', 'old-waiting', 1, false, now() - interval '40 days')"  # collect's to decide
    )
    conn.execute(
        "INSERT INTO otlp_span (trace_id, span_id, phase, domain, job_id, attempt) VALUES"
        " ('t', 1, 1, 'd', 'old-settled', 1), ('t', 2, 1, 'd', 'new-settled', 1)"
    )
    conn.execute(
        "INSERT INTO otlp_trace (trace_id, touched_at) VALUES"
        " ('t', now() - interval '40 days'), ('empty', now() - interval '40 days')"
    )
    result = prune(dsn, timedelta(days=30), batch_size=1)
    assert result.settled_attempts == 1
    assert rows(conn, "SELECT job_id FROM otlp_attempt ORDER BY 1") == [
        ("new-settled",),
        ("old-waiting",),
    ]
    assert rows(conn, "SELECT job_id FROM otlp_span") == [("new-settled",)]
    assert rows(conn, "SELECT trace_id FROM otlp_trace") == [("t",)]  # a span is left
