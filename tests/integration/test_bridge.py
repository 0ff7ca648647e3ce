"""The bridge against a real PostgreSQL: rows, order, timestamps, guards, ownership."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_jobsteps import JOB_STEP_KEY, JobStepsProcessor, job_attempt, progress, step
from otel_jobsteps._cli.demo import record_seed_story
from tests.helpers import TracingFactory, free_port, rows, wait_until


def _at(ns: int) -> datetime:
    return datetime.fromtimestamp(ns // 1000 / 1e6, tz=timezone.utc).replace(
        microsecond=(ns // 1000) % 1_000_000
    )


def test_seed_story_rows(tracing: TracingFactory, conn: psycopg.Connection[Any]) -> None:
    tracer, processor = tracing()
    record_seed_story(tracer, "42", domain="render")
    assert processor.force_flush(10_000)
    steps = rows(
        conn,
        "SELECT attempt, step_key, step_status, detail, message, ended_at IS NOT NULL"
        " FROM job_event WHERE type = 'STEP' ORDER BY id",
    )
    assert steps == [
        (1, "RENDER", "COMPLETED", {"pct": 100, "frames": 300}, None, True),
        (1, "SAVE", "FAILED", {"bytes": 4096}, "OSError: disk full", True),
        (2, "RENDER", "COMPLETED", {"pct": 100, "frames": 300}, None, True),
        (2, "SAVE", "COMPLETED", {"bytes": 4096}, None, True),
    ]
    logs = rows(conn, "SELECT attempt, status, reason, detail FROM job_log ORDER BY attempt")
    assert logs == [
        (1, "FAILED", "error", {"step": "SAVE", "error": "OSError: disk full"}),
        (2, "COMPLETED", None, None),
    ]
    # The log of each attempt is never dated before its last step close.
    assert rows(
        conn,
        "SELECT count(*) FROM job_log l JOIN job_event e USING (domain, job_id, attempt)"
        " WHERE l.created_at < e.ended_at",
    ) == [(0,)]


def test_timestamps_are_the_spans_own(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    tracer, processor = tracing()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with job_attempt("render", "7", "thumbnail", tracer=tracer):
        with step("RENDER", tracer=tracer):
            pass
        with step("SAVE", tracer=tracer):
            pass
    assert processor.force_flush(10_000)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    got = rows(conn, "SELECT step_key, created_at, ended_at FROM job_event ORDER BY id")
    assert got == [
        ("RENDER", _at(spans["render"].start_time or 0), _at(spans["render"].end_time or 0)),
        ("SAVE", _at(spans["save"].start_time or 0), _at(spans["save"].end_time or 0)),
    ]
    ((logged,),) = rows(conn, "SELECT created_at FROM job_log")
    assert logged == _at(spans["job thumbnail"].end_time or 0)


def test_a_step_row_closed_elsewhere_is_never_overwritten(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    tracer, processor = tracing(debounce_ms=0)
    with job_attempt("render", "9", "thumbnail", tracer=tracer), step("RENDER", tracer=tracer):
        assert processor.force_flush(10_000)
        # Another path (a sweep, a successor) settles the row while the step still runs.
        conn.execute(
            "UPDATE job_event SET step_status = 'FAILED', message = 'abandoned', ended_at = now()"
            " WHERE step_key = 'RENDER'"
        )
        progress(pct=99)
    assert processor.force_flush(10_000)
    assert rows(conn, "SELECT step_status, message, detail FROM job_event") == [
        ("FAILED", "abandoned", None)
    ]


def test_attempt_two_settles_an_attempt_left_open(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    tracer, processor = tracing()
    dead = tracer.start_span(
        "job",
        attributes={"job.domain": "render", "job.id": "5", "job.type": "t", "job.attempt": 1},
    )
    with trace.use_span(dead, end_on_exit=False):
        tracer.start_span("render", attributes={JOB_STEP_KEY: "RENDER"})  # worker "dies" here
    assert processor.force_flush(10_000)
    with (
        job_attempt("render", "5", "t", attempts_made=1, tracer=tracer),
        step("RENDER", tracer=tracer),
    ):
        pass
    assert processor.force_flush(10_000)
    assert rows(conn, "SELECT attempt, step_status, message FROM job_event ORDER BY id") == [
        (1, "FAILED", "abandoned"),
        (2, "COMPLETED", None),
    ]
    assert rows(conn, "SELECT attempt, status, reason, detail FROM job_log ORDER BY attempt") == [
        (1, "FAILED", "abandoned", {"step": "RENDER"}),
        (2, "COMPLETED", None, None),
    ]
    # The dead execution's late writes change nothing now.
    dead.end()
    assert processor.force_flush(10_000)
    assert rows(conn, "SELECT attempt, status FROM job_log ORDER BY attempt") == [
        (1, "FAILED"),
        (2, "COMPLETED"),
    ]


def test_a_rerun_of_the_same_attempt_takes_over_from_the_zombie(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    zombie_tracer, zombie = tracing()
    tracer, processor = tracing()
    attributes = {"job.domain": "render", "job.id": "8", "job.type": "t", "job.attempt": 1}
    zombie_job = zombie_tracer.start_span("job", attributes=attributes)
    with trace.use_span(zombie_job, end_on_exit=False):
        zombie_step = zombie_tracer.start_span("r", attributes={JOB_STEP_KEY: "RENDER"})
    assert zombie.force_flush(10_000)
    with (
        tracer.start_as_current_span("job", attributes=attributes),
        tracer.start_as_current_span("r", attributes={JOB_STEP_KEY: "RENDER"}),
    ):
        assert processor.force_flush(10_000)
        # The zombie wakes up and writes into "its" row: it must not touch the re-run's.
        zombie_step.add_event("progress", {"zombie": True})
        zombie_step.end()
        assert zombie.force_flush(10_000)
    zombie_job.end()
    assert zombie.force_flush(10_000)
    assert processor.force_flush(10_000)
    got = rows(conn, "SELECT step_status, message, detail FROM job_event ORDER BY id")
    assert got == [("FAILED", "abandoned", None), ("COMPLETED", None, None)]
    assert rows(conn, "SELECT attempt, status FROM job_log") == [(1, "COMPLETED")]


def test_one_open_step_per_attempt_is_a_database_fact(conn: psycopg.Connection[Any]) -> None:
    insert = (
        "INSERT INTO job_event (domain, job_id, attempt, type, step_key, step_status)"
        " VALUES ('d', 'j', 1, 'STEP', %s, 'RUNNING')"
    )
    conn.execute(insert, ("A",))
    with pytest.raises(psycopg.errors.UniqueViolation):
        conn.execute(insert, ("B",))


def test_plain_sql_events_need_only_scope_type_and_message(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO job_event (domain, job_id, type, message) VALUES ('d', 'j', 'STALLED', 'x')"
    )
    assert rows(conn, "SELECT attempt, ended_at FROM job_event") == [(1, None)]


DEBOUNCE_FOR_REAL_MS = 500


def _progress_left_to_the_timer(
    tracer: Any, processor: JobStepsProcessor, conn: psycopg.Connection[Any], job_id: str
) -> bool:
    """A step whose second progress the writer took inside its window (else False, nothing
    proven: it may have been written at once as a new first write); then only the trailing
    timer can write it, and it must."""
    window_s = DEBOUNCE_FOR_REAL_MS / 1000
    with job_attempt("render", job_id, "t", tracer=tracer), step("RENDER", tracer=tracer):
        sent_first = time.monotonic()
        progress(pct=1)
        assert processor.force_flush(10_000)  # the first write: its window starts
        taken = processor.stats()["commands"]
        progress(pct=2)  # no flush from here on
        wait_until(lambda: processor.stats()["commands"] > taken, what="pct=2 taken")
        if time.monotonic() - sent_first >= window_s:
            return False
        wait_until(
            lambda: (
                rows(conn, "SELECT detail FROM job_event WHERE job_id = %s", job_id)
                == [({"pct": 2},)]
            ),
            what="the trailing progress write",
            timeout_s=10,
        )
    return True


def test_debounce_for_real(tracing: TracingFactory, conn: psycopg.Connection[Any]) -> None:
    """Once with the real clock: a trailing write lands after its window without a flush.
    A machine too slow to prove the progress fell inside the window tries the next job."""
    tracer, processor = tracing(debounce_ms=DEBOUNCE_FOR_REAL_MS)
    proven = any(_progress_left_to_the_timer(tracer, processor, conn, str(n)) for n in range(5))
    assert proven, "the writer never took a progress within its window: too slow to tell"
    assert processor.force_flush(10_000)


@pytest.fixture
def silent_server() -> Iterator[tuple[str, threading.Event]]:
    """A TCP server that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            held.append(client)
            accepted.set()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    port = listener.getsockname()[1]
    yield f"postgresql://u:hunter2@127.0.0.1:{port}/db?sslmode=disable", accepted
    listener.shutdown(socket.SHUT_RDWR)
    listener.close()
    server.join(5)
    for client in held:
        client.close()


def _refused_dsn() -> str:
    return f"postgresql://u:hunter2@127.0.0.1:{free_port()}/db"  # nothing listens there


def test_refused_database_never_reaches_the_job(caplog: pytest.LogCaptureFixture) -> None:
    processor = JobStepsProcessor(_refused_dsn(), shutdown_timeout_ms=1000)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    for n in range(50):
        with job_attempt("render", str(n), "t", tracer=tracer), step("RENDER", tracer=tracer):
            progress(pct=n)
    assert not processor.force_flush(300)
    # However long the refused attempt takes on a loaded machine: it is counted once it failed.
    wait_until(lambda: processor.stats().get("write_failed"), what="a refused connection")
    stats = processor.stats()
    assert "hunter2" not in repr(stats)
    assert "hunter2" not in caplog.text
    provider.shutdown()


def test_a_server_that_never_answers_does_not_block_the_job(
    silent_server: tuple[str, threading.Event],
) -> None:
    dsn, accepted = silent_server
    processor = JobStepsProcessor(dsn, connect_timeout_s=30, shutdown_timeout_ms=200)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    with job_attempt("render", "1", "t", tracer=tracer), step("RENDER", tracer=tracer):
        pass
    assert accepted.wait(10)  # the writer is now stuck connecting, for up to 30 s
    for n in range(200):  # ... and jobs still run to completion meanwhile
        with job_attempt("render", str(n), "t", tracer=tracer), step("RENDER", tracer=tracer):
            progress(pct=n)
    assert not processor.force_flush(100)
    provider.shutdown()  # bounded by shutdown_timeout_ms even though the writer is stuck


def test_forked_child_writes_its_own_rows_once(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    tracer, processor = tracing()
    with job_attempt("render", "parent-before", "t", tracer=tracer), step("A", tracer=tracer):
        pass
    assert processor.force_flush(10_000)  # the parent holds an open connection now
    pid = os.fork()
    if pid == 0:  # the child: a job, a flush, and a hard exit
        code = 1
        try:
            with job_attempt("render", "child", "t", tracer=tracer), step("B", tracer=tracer):
                pass
            code = 0 if processor.force_flush(10_000) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with job_attempt("render", "parent-after", "t", tracer=tracer), step("C", tracer=tracer):
        pass
    assert processor.force_flush(10_000)  # the parent's connection survived the child
    assert rows(conn, "SELECT job_id, step_key FROM job_event ORDER BY job_id") == [
        ("child", "B"),
        ("parent-after", "C"),
        ("parent-before", "A"),
    ]
    assert processor.stats().get("write_failed", 0) == 0
