"""``writer="process"``: the same rows as the writer thread, live progress, a writer process
that dies is replaced, and one that outlives its job's process does not stay behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer

from otel_jobsteps import JobStepsProcessor, job_attempt, progress, step
from otel_jobsteps._cli.demo import record_seed_story
from otel_jobsteps.maintenance import sweep
from tests.helpers import TracingFactory, free_port, rows, wait_until, writer_processes

STEPS = "SELECT attempt, step_key, step_status, detail, message FROM job_event"
LOGS = "SELECT attempt, status, reason, detail FROM job_log"
EVENTS = "SELECT attempt, type, message, detail FROM job_event"


def _tell(processor: JobStepsProcessor, job_id: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(processor)
    try:
        record_seed_story(provider.get_tracer("tests"), job_id, stalled=True)
        assert processor.force_flush(10_000)
    finally:
        provider.shutdown()


def _story(conn: psycopg.Connection[Any], job_id: str) -> tuple[list[Any], ...]:
    return (
        rows(conn, f"{STEPS} WHERE job_id = %s AND type = 'STEP' ORDER BY id", job_id),
        rows(conn, f"{EVENTS} WHERE job_id = %s AND type <> 'STEP' ORDER BY id", job_id),
        rows(conn, f"{LOGS} WHERE job_id = %s ORDER BY attempt", job_id),
    )


def _running_writer(
    tracing: TracingFactory, job_id: str
) -> tuple[Tracer, JobStepsProcessor, set[int], int]:
    """A processor with the writer process that has written job ``job_id``: its tracer, itself,
    the writer processes other tests left running (if any), and the pid of its own."""
    others = set(writer_processes())
    tracer, processor = tracing(writer="process")
    with job_attempt("render", job_id, "thumbnail", tracer=tracer), step("A", tracer=tracer):
        pass
    assert processor.force_flush(10_000)
    (writer,) = set(writer_processes()) - others
    return tracer, processor, others, writer


def test_the_seed_story_reads_the_same_from_the_writer_process(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    _tell(JobStepsProcessor(dsn), "thread")
    _tell(JobStepsProcessor(dsn, writer="process"), "process")

    by_thread, by_process = _story(conn, "thread"), _story(conn, "process")
    assert by_process == by_thread
    steps, events, logs = by_process
    assert [(s[1], s[2]) for s in steps] == [
        ("RENDER", "COMPLETED"),
        ("SAVE", "FAILED"),
        ("RENDER", "COMPLETED"),
        ("SAVE", "COMPLETED"),
    ]
    assert steps[1][4] == "OSError: disk full"
    assert [e[1] for e in events] == ["STALLED", "RETRY_SCHEDULED", "STALLED"]
    assert [log[1] for log in logs] == ["FAILED", "COMPLETED"]


def test_progress_reaches_the_row_while_the_step_runs(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    tracer, processor = tracing(writer="process", debounce_ms=0)
    with job_attempt("render", "live", "thumbnail", tracer=tracer), step("RENDER", tracer=tracer):
        progress(pct=40)
        assert processor.force_flush(10_000)
        running = rows(conn, "SELECT step_status, detail, ended_at FROM job_event")
        assert running == [("RUNNING", {"pct": 40}, None)]
        progress(pct=90)
    assert processor.force_flush(10_000)
    assert rows(conn, "SELECT step_status, detail FROM job_event") == [("COMPLETED", {"pct": 90})]
    assert processor.stats()["operations_written"] >= 3


def test_a_writer_process_that_dies_is_replaced(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    tracer, processor, others, first = _running_writer(tracing, "before")

    os.kill(first, signal.SIGKILL)
    wait_until(
        lambda: processor.stats().get("writer_process_exited"), what="the death to be noticed"
    )

    def written_after() -> bool:
        # Jobs relayed while no writer process runs are lost (and counted); a later one lands.
        number = processor.stats().get("dropped_facts", 0)
        job_id = f"after-{number}"
        with job_attempt("render", job_id, "thumbnail", tracer=tracer), step("B", tracer=tracer):
            pass
        return processor.force_flush(5_000) and bool(
            rows(conn, "SELECT 1 FROM job_log WHERE job_id = %s", job_id)
        )

    wait_until(written_after, what="a job written by a new writer process", timeout_s=60)
    assert set(writer_processes()) - others - {first}
    assert processor.stats()["writer_process_exited"] == 1
    assert rows(conn, "SELECT status FROM job_log WHERE job_id = 'before'") == [("COMPLETED",)]


def _kill_and_await_the_restart(processor: JobStepsProcessor, writer: int) -> None:
    """SIGKILL the writer process and wait until the relay has noticed (a new one starts at the
    next send or flush)."""
    exited = processor.stats().get("writer_process_exited", 0)
    os.kill(writer, signal.SIGKILL)
    wait_until(
        lambda: processor.stats().get("writer_process_exited", 0) > exited,
        what="the death to be noticed",
    )


def test_a_job_in_flight_when_its_writer_process_dies_is_written_whole(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    """Issue 22: FETCH done, RENDER running and committed, the writer process SIGKILLed; the
    new one is told what is open, so RENDER and the attempt close as they end."""
    others = set(writer_processes())
    tracer, processor = tracing(writer="process", debounce_ms=0)
    with job_attempt("render", "in-flight", "thumbnail", tracer=tracer):
        with step("FETCH", tracer=tracer):
            progress(pct=100)
        with step("RENDER", tracer=tracer):
            progress(pct=10)
            assert processor.force_flush(10_000)
            (writer,) = set(writer_processes()) - others
            _kill_and_await_the_restart(processor, writer)
            progress(pct=60)
            assert processor.force_flush(10_000)  # a new writer process: told, then the rest
            assert rows(conn, f"{STEPS} WHERE step_key = 'RENDER'") == [
                (1, "RENDER", "RUNNING", {"pct": 60}, None)
            ]
        with step("SAVE", tracer=tracer):
            pass
    assert processor.force_flush(10_000)

    assert rows(conn, f"{STEPS} ORDER BY id") == [
        (1, "FETCH", "COMPLETED", {"pct": 100}, None),
        (1, "RENDER", "COMPLETED", {"pct": 60}, None),
        (1, "SAVE", "COMPLETED", None, None),
    ]
    assert rows(conn, LOGS) == [(1, "COMPLETED", None, None)]
    assert processor.stats()["writer_process_exited"] == 1
    conn.execute(
        "UPDATE job_event SET created_at = created_at - interval '1 hour',"
        " ended_at = ended_at - interval '1 hour', heartbeat_at = now() - interval '1 hour'"
    )
    assert sweep(conn, timedelta(minutes=10)) == []  # nothing left for sweep to fail


def test_an_attempt_between_steps_is_heartbeated_by_the_new_writer_process(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    """Issue 22: FETCH closed, the next step not started, the writer process SIGKILLed; the new
    one heartbeats the attempt on FETCH's row before any new step, so sweep leaves it alone."""
    others = set(writer_processes())
    tracer, processor = tracing(writer="process", heartbeat_interval_s=0.05)
    with job_attempt("render", "between", "thumbnail", tracer=tracer):
        with step("FETCH", tracer=tracer):
            pass
        assert processor.force_flush(10_000)
        (writer,) = set(writer_processes()) - others
        _kill_and_await_the_restart(processor, writer)
        assert processor.force_flush(10_000)  # a new writer process, told the open job span
        # An hour old and silent since: only the new process's heartbeat can make it recent.
        conn.execute(
            "UPDATE job_event SET created_at = created_at - interval '1 hour',"
            " ended_at = ended_at - interval '1 hour', heartbeat_at = now() - interval '1 hour'"
        )
        wait_until(
            lambda: rows(
                conn,
                "SELECT 1 FROM job_event WHERE step_key = 'FETCH'"
                " AND heartbeat_at > now() - interval '1 minute'",
            ),
            what="FETCH's row heartbeated by the new writer process",
        )
        assert sweep(conn, timedelta(minutes=10)) == []  # alive: nothing settled
        with step("SAVE", tracer=tracer):
            pass
    assert processor.force_flush(10_000)

    assert rows(conn, f"{STEPS} ORDER BY id") == [
        (1, "FETCH", "COMPLETED", None, None),
        (1, "SAVE", "COMPLETED", None, None),
    ]
    assert rows(conn, LOGS) == [(1, "COMPLETED", None, None)]


def test_the_writer_process_finishes_and_ends_with_its_job_process(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """A job process that exits without flushing: the provider's exit hook shuts the relay
    down, the writer process writes what it was sent and exits too."""
    script = textwrap.dedent(
        f"""
        import sys
        from opentelemetry.sdk.trace import TracerProvider
        from otel_jobsteps import JobStepsProcessor, job_attempt, step
        provider = TracerProvider()
        # The default 5 s to write what is queued at exit is short on a loaded machine.
        processor = JobStepsProcessor({dsn!r}, writer="process", shutdown_timeout_ms=30_000)
        provider.add_span_processor(processor)
        tracer = provider.get_tracer("script")
        for number in range(50):
            with job_attempt("render", f"exit-{{number}}", "thumbnail", tracer=tracer):
                with step("A", tracer=tracer):
                    pass
        from tests.helpers import writer_processes
        print(*writer_processes())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=Path(__file__).parents[2],
    )
    assert "Traceback" not in done.stderr
    (writer,) = map(int, done.stdout.split())
    assert not Path(f"/proc/{writer}").exists()  # reaped by the job process's exit hook
    assert rows(conn, "SELECT count(*) FROM job_log WHERE job_id LIKE 'exit-%%'") == [(50,)]
    assert rows(conn, "SELECT count(*) FROM job_event WHERE ended_at IS NULL") == [(0,)]


def test_a_forked_child_gets_its_own_writer_process(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    tracer, processor, others, parents = _running_writer(tracing, "parent")

    pid = os.fork()
    if pid == 0:  # the child: its own relay and writer process; the parent's pipe untouched
        code = 1
        try:
            with (
                job_attempt("render", "child", "thumbnail", tracer=tracer),
                step("B", tracer=tracer),
            ):
                pass
            flushed = processor.force_flush(10_000)
            code = 0 if flushed and writer_processes() else 2  # the parent's are not ours
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)

    assert os.waitstatus_to_exitcode(status) == 0
    with job_attempt("render", "parent-2", "thumbnail", tracer=tracer), step("C", tracer=tracer):
        pass
    assert processor.force_flush(10_000)
    assert set(writer_processes()) - others == {parents}
    logged = rows(conn, "SELECT job_id FROM job_log ORDER BY job_id")
    assert logged == [("child",), ("parent",), ("parent-2",)]


def test_a_stop_sent_to_the_process_group_is_left_to_the_job(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    tracer, processor, others, writer = _running_writer(tracing, "before")

    os.kill(writer, signal.SIGTERM)  # what systemd or a container sends the whole group
    with job_attempt("render", "after", "thumbnail", tracer=tracer), step("B", tracer=tracer):
        pass

    assert processor.force_flush(10_000)
    assert set(writer_processes()) - others == {writer}
    assert "writer_process_exited" not in processor.stats()
    assert rows(conn, "SELECT job_id FROM job_log ORDER BY job_id") == [("after",), ("before",)]


def test_flushes_during_an_outage_hold_one_thread(caplog: pytest.LogCaptureFixture) -> None:
    """A framework that flushes after every task, while the database is away: the writer
    process waits for the database on one thread, not one per flush; its warning is logged
    in the job's process, through the job's logging."""
    dsn = f"postgresql://nobody@127.0.0.1:{free_port()}/none?connect_timeout=1"
    others = set(writer_processes())
    processor = JobStepsProcessor(dsn, writer="process", shutdown_timeout_ms=500)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests")
    try:
        for number in range(40):
            with job_attempt("render", str(number), "thumbnail", tracer=tracer):
                pass
            assert not processor.force_flush(20)
        (writer,) = set(writer_processes()) - others
        status = Path(f"/proc/{writer}/status").read_text()
        threads = int(status.split("Threads:")[1].split()[0])
        assert threads <= 5  # main, writer, flushes, counters (and nothing per flush)
        wait_until(lambda: processor.stats().get("write_failed"), what="the failure counted")
        warned = wait_until(
            lambda: [r for r in caplog.records if "write_failed" in r.getMessage()],
            what="the writer process's warning logged here",
        )
        assert warned[0].name == "otel_jobsteps"
        assert f"(writer process {writer})" in warned[0].getMessage()
    finally:
        provider.shutdown()
