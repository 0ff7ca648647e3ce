"""Several processes and threads writing the same attempt and the same step at once."""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JobStepsProcessor, job_attempt, progress, step
from otel_jobsteps._core.batch import Batch
from otel_jobsteps._core.commands import JobStarted, Scope, StepStarted
from otel_jobsteps._core.recorder import StepRecorder
from otel_jobsteps._pg.store import StepStore, statement_params, statements
from otel_jobsteps.sql import qualified_queries
from tests.helpers import TracingFactory, rows, wait_until

WORKERS = 4
ROUNDS = 15


def _run_same_attempts(dsn: str, start: Any, results: Any, worker: int) -> None:
    """One process: every round, the same job and attempt as every other process."""
    processor = JobStepsProcessor(dsn, debounce_ms=0)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("race")
    start.wait()
    for round_ in range(ROUNDS):
        for key in ("FETCH", "RENDER", "SAVE"):
            with job_attempt("race", f"job-{round_}", "t", tracer=tracer), step(key, tracer=tracer):
                progress(worker=worker)
    flushed = processor.force_flush(30_000)
    stats = processor.stats()
    provider.shutdown()
    results.put((flushed, {k: v for k, v in stats.items() if k.startswith(("rejected", "drop"))}))


def test_racing_processes_keep_one_open_step_and_one_log_per_attempt(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    results = context.Queue()
    workers = [
        context.Process(target=_run_same_attempts, args=(dsn, start, results, n))
        for n in range(WORKERS)
    ]
    for process in workers:
        process.start()
    start.set()
    outcomes = [results.get(timeout=120) for _ in workers]
    for process in workers:
        process.join(30)
        assert process.exitcode == 0
    assert outcomes == [(True, {})] * WORKERS  # no rejected batch, nothing dropped
    assert rows(conn, "SELECT count(*) FROM job_event WHERE ended_at IS NULL") == [(0,)]
    assert (
        rows(conn, "SELECT job_id, count(*) FROM job_log GROUP BY job_id HAVING count(*) <> 1")
        == []
    )
    assert rows(conn, "SELECT count(DISTINCT job_id) FROM job_log") == [(ROUNDS,)]
    # Each process wrote each of its steps once: a step is never lost in a race.
    assert rows(conn, "SELECT count(*) FROM job_event WHERE type = 'STEP'") == [
        (WORKERS * ROUNDS * 3,)
    ]


@pytest.mark.parametrize("threads", [8])
def test_racing_threads_in_one_process(
    tracing: TracingFactory, conn: psycopg.Connection[Any], threads: int
) -> None:
    tracer, processor = tracing(debounce_ms=0)
    barrier = threading.Barrier(threads)

    def work(n: int) -> None:
        barrier.wait()
        for key in ("A", "B", "C"):
            with job_attempt("race", "shared", "t", tracer=tracer), step(key, tracer=tracer):
                progress(thread=n)

    pool = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert processor.force_flush(30_000)
    assert rows(conn, "SELECT count(*) FROM job_event WHERE ended_at IS NULL") == [(0,)]
    assert rows(conn, "SELECT count(*) FROM job_log") == [(1,)]
    assert rows(conn, "SELECT count(*) FROM job_event") == [(threads * 3,)]


def _open_step_batch(execution: str, at_us: int) -> Batch:
    recorder = StepRecorder()
    scope = Scope("race", "held", "t", 1, execution, 1, 2, None)
    recorder.handle(JobStarted(scope, at_us * 1000))
    recorder.handle(StepStarted(scope, "RENDER", 3, at_us * 1000))
    batch = recorder.take_batch()
    assert batch is not None
    return batch


def test_a_step_opened_concurrently_by_another_execution_is_taken_over(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """Their insert commits while ours waits on it: ours must still land, theirs be closed."""
    theirs, ours = StepStore(dsn), StepStore(dsn)
    holder = theirs.connection()
    holder.execute("BEGIN")
    with holder.cursor() as cur:  # their open step, not yet committed
        for name, ops in statements(_open_step_batch("theirs", 1_000)):
            cur.execute(
                qualified_queries("queries.sql", "public")[name], statement_params(ops, 1024)
            )
    writer = threading.Thread(target=ours.write, args=(_open_step_batch("ours", 2_000),))
    writer.start()
    wait_until(
        lambda: (
            rows(
                conn,
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND application_name = 'otel_jobsteps'",
            )
            != [(0,)]
        ),
        what="our insert to wait on their uncommitted row",
        timeout_s=10,
    )
    holder.execute("COMMIT")
    writer.join(30)
    theirs.close()
    ours.close()
    assert rows(conn, "SELECT execution_id, step_status, message FROM job_event ORDER BY id") == [
        ("theirs", "FAILED", "abandoned"),
        ("ours", "RUNNING", None),
    ]
