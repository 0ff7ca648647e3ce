"""Workers killed with SIGKILL mid-step or between steps: the next attempt or a sweep settles
them; a live, quiet attempt with a heartbeat is never swept."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JOB_STEP_KEY, JobStepsProcessor, job_attempt, progress, step
from otel_jobsteps.maintenance import sweep
from tests.helpers import TracingFactory, rows, wait_until

HOUR_NS = 3600 * 10**9


def _worker(dsn: str, job_id: str, ready: Any, started_long_ago: bool, between: bool) -> None:
    """Open a step (``between``: and close it), make sure its row is written, say so, then hang
    until killed: mid-step, or between steps with the job span still open."""
    processor = JobStepsProcessor(dsn, heartbeat_interval_s=0.05)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("worker")
    start = time.time_ns() - HOUR_NS if started_long_ago else None
    attributes = {"job.domain": "dead", "job.id": job_id, "job.type": "t", "job.attempt": 1}
    job = tracer.start_span("job", attributes=attributes, start_time=start)
    with trace.use_span(job):
        render = tracer.start_span("render", attributes={JOB_STEP_KEY: "RENDER"}, start_time=start)
        if between:
            render.end(end_time=None if start is None else start + 10**9)
        processor.force_flush(10_000)
        ready.set()
        signal.pause()  # forever


def _start(dsn: str, job_id: str, *, started_long_ago: bool = False, between: bool = False) -> Any:
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    process = context.Process(target=_worker, args=(dsn, job_id, ready, started_long_ago, between))
    process.start()
    assert ready.wait(60)
    return process


def _kill(process: Any) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.join(10)
    assert process.exitcode == -signal.SIGKILL


def _writer_backends(conn: psycopg.Connection[Any]) -> list[int]:
    """Pids of the backends that writers hold in the test database."""
    found = conn.execute(
        "SELECT pid FROM pg_stat_activity"
        " WHERE application_name = 'otel_jobsteps' AND datname = current_database()"
    ).fetchall()
    assert found, "no writer connected"
    return [pid for (pid,) in found]


def _await_exit(conn: psycopg.Connection[Any], backends: list[int]) -> None:
    """Until ``backends`` are gone: a statement a killed worker sent just before it died has
    then landed or been rolled back, so it cannot overwrite what the test writes next."""
    wait_until(
        lambda: (
            not conn.execute(
                "SELECT FROM pg_stat_activity WHERE pid = ANY(%s)", (backends,)
            ).fetchall()
        ),
        what=f"backends {backends} to exit",
    )


def _heartbeat(conn: psycopg.Connection[Any], job_id: str) -> Any:
    """The heartbeat on the job's latest step row (open, or closed between steps)."""
    found = conn.execute(
        "SELECT heartbeat_at FROM job_event WHERE job_id = %s AND type = 'STEP'"
        " ORDER BY id DESC LIMIT 1",
        (job_id,),
    ).fetchone()
    return found[0] if found else None


def _await_beat_after(conn: psycopg.Connection[Any], job_id: str, after: Any) -> Any:
    def beat_after() -> Any:
        beat = _heartbeat(conn, job_id)
        return beat if beat is not None and (after is None or beat > after) else None

    return wait_until(beat_after, what=f"a heartbeat of {job_id}", timeout_s=10)


@pytest.mark.parametrize(
    ("between", "first_step"),
    [
        pytest.param(False, (1, "FAILED", "abandoned"), id="mid-step"),
        pytest.param(True, (1, "COMPLETED", None), id="between-steps"),
    ],
)
def test_the_next_attempt_settles_a_killed_one(
    dsn: str,
    tracing: TracingFactory,
    conn: psycopg.Connection[Any],
    between: bool,
    first_step: tuple[Any, ...],
) -> None:
    _kill(_start(dsn, "next", between=between))
    tracer, processor = tracing()
    with job_attempt("dead", "next", "t", attempts_made=1, tracer=tracer):
        with step("RENDER", tracer=tracer):
            pass
    assert processor.force_flush(10_000)
    assert rows(conn, "SELECT attempt, step_status, message FROM job_event ORDER BY id") == [
        first_step,
        (2, "COMPLETED", None),
    ]
    assert rows(conn, "SELECT attempt, status, reason, detail FROM job_log ORDER BY attempt") == [
        (1, "FAILED", "abandoned", {"step": "RENDER"}),
        (2, "COMPLETED", None, None),
    ]
    # Never dated before the killed attempt's last step closed.
    assert rows(
        conn,
        "SELECT l.created_at >= e.ended_at FROM job_log l JOIN job_event e USING (attempt)"
        " WHERE attempt = 1",
    ) == [(True,)]
    assert rows(conn, "SELECT attempt, status FROM job_attempt ORDER BY attempt") == [
        (1, "FAILED"),
        (2, "COMPLETED"),
    ]


def test_sweep_settles_a_killed_worker_and_spares_a_live_quiet_one(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    dead = _start(dsn, "killed")
    dead_backends = _writer_backends(conn)  # the only worker so far
    alive = _start(dsn, "quiet", started_long_ago=True)  # an hour-long step, still beating
    try:
        last_beat = _await_beat_after(conn, "killed", None)
        _kill(dead)
        _await_exit(conn, dead_backends)  # its last heartbeat must not land after the move
        # Let the silence be long: move the dead worker's last signs of life an hour back.
        conn.execute(
            "UPDATE job_event SET created_at = created_at - interval '1 hour',"
            " heartbeat_at = heartbeat_at - interval '1 hour' WHERE job_id = 'killed'"
        )
        _await_beat_after(conn, "quiet", last_beat)  # the live one keeps beating
        swept = sweep(conn, timedelta(minutes=10))
        assert [(s.job_id, s.step_key) for s in swept] == [("killed", "RENDER")]
        assert rows(conn, "SELECT job_id, status, reason FROM job_log") == [
            ("killed", "FAILED", "abandoned")
        ]
        assert rows(conn, "SELECT job_id, step_status FROM job_event WHERE ended_at IS NULL") == [
            ("quiet", "RUNNING")
        ]
    finally:
        _kill(alive)
        if dead.is_alive():
            _kill(dead)


def test_sweep_settles_a_worker_killed_between_steps_and_spares_a_live_one(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    dead = _start(dsn, "killed", between=True)
    dead_backends = _writer_backends(conn)  # the only worker so far
    alive = _start(dsn, "quiet", started_long_ago=True, between=True)  # beating between steps
    try:
        last_beat = _await_beat_after(conn, "killed", None)
        _kill(dead)
        _await_exit(conn, dead_backends)  # its last heartbeat must not land after the move
        conn.execute(
            "UPDATE job_event SET created_at = created_at - interval '1 hour',"
            " ended_at = ended_at - interval '1 hour',"
            " heartbeat_at = heartbeat_at - interval '1 hour' WHERE job_id = 'killed'"
        )
        _await_beat_after(conn, "quiet", last_beat)  # the live one keeps beating
        preview = sweep(conn, timedelta(minutes=10), dry_run=True)
        assert rows(conn, "SELECT count(*) FROM job_log") == [(0,)]
        swept = sweep(conn, timedelta(minutes=10))
        assert preview == swept
        assert [(s.job_id, s.step_key, s.closes_step, s.writes_job_log) for s in swept] == [
            ("killed", "RENDER", False, True)
        ]
        assert rows(conn, "SELECT job_id, status, reason, detail FROM job_log") == [
            ("killed", "FAILED", "abandoned", {"step": "RENDER"})
        ]
        assert rows(conn, "SELECT job_id, status FROM job_attempt ORDER BY job_id") == [
            ("killed", "FAILED"),
            ("quiet", "RUNNING"),
        ]
        assert sweep(conn, timedelta(minutes=10)) == []
    finally:
        _kill(alive)
        if dead.is_alive():
            _kill(dead)


def test_heartbeats_keep_coming_while_other_jobs_keep_the_writer_busy(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    tracer, processor = tracing(heartbeat_interval_s=0.1)
    beats: set[Any] = set()
    with job_attempt("busy", "long", "t", tracer=tracer), step("RENDER", tracer=tracer):
        for n in range(100_000):  # a steady stream of short jobs, written batch after batch
            with job_attempt("busy", f"short-{n}", "t", tracer=tracer), step("S", tracer=tracer):
                pass
            if n % 50 == 0:
                beats.add(_heartbeat(conn, "long"))
                if len(beats - {None}) >= 3:
                    break
    assert len(beats - {None}) >= 3, "the long step's heartbeat stopped advancing"
    assert processor.force_flush(10_000)


def test_a_progress_write_is_a_sign_of_life(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    """Between two heartbeats, a written progress moves heartbeat_at once the step's last sign
    of life is 15 s old (`sweep`, `/running` and "silent for" see the step alive); a progress
    written sooner leaves it, so that write stays HOT beside job_event_open_gauges."""
    tracer, processor = tracing(heartbeat_interval_s=3600)
    with job_attempt("render", "alive", "t", tracer=tracer), step("RENDER", tracer=tracer):
        assert processor.force_flush(10_000)
        progress(pct=5)
        assert processor.force_flush(10_000)
        assert rows(conn, "SELECT heartbeat_at FROM job_event WHERE job_id = 'alive'") == [(None,)]
        conn.execute(
            "UPDATE job_event SET created_at = created_at - interval '1 minute'"
            " WHERE job_id = 'alive'"
        )
        progress(pct=10)
        assert processor.force_flush(10_000)
        ((seen,),) = rows(
            conn, "SELECT heartbeat_at > created_at FROM job_event WHERE job_id = 'alive'"
        )
        assert seen is True
        ((beat,),) = rows(conn, "SELECT heartbeat_at FROM job_event WHERE job_id = 'alive'")
        progress(pct=20)
        assert processor.force_flush(10_000)
        assert rows(
            conn, "SELECT heartbeat_at, detail->>'pct' FROM job_event WHERE job_id = 'alive'"
        ) == [(beat, "20")]
