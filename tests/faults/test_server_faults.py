"""The server says no for a while: lock waits, deadlocks, serialization failures, a killed
backend, a restart, a read-only server, a reply that never comes.

Each fault is made on a real PostgreSQL while jobs run. The jobs must not notice (`run_job`
raises on anything unplanned, and their rows are still missing while the fault lasts), and once
it is over the rows are exactly those of the jobs: nothing lost, nothing written twice, no row
rejected as bad data.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
import pytest
from psycopg import sql

from otel_jobsteps import JobStepsProcessor
from tests.faults.proxy import FaultProxy, Mode
from tests.faults.support import (
    BridgeFactory,
    JobRows,
    assert_rows,
    close_open_step,
    plan,
    run_job,
    run_jobs,
    start_open_step,
    stat,
    step_rows,
)
from tests.helpers import wait_until

Conn = psycopg.Connection[Any]
WRITER_BACKENDS = (
    "SELECT pid FROM pg_stat_activity"
    " WHERE application_name = 'otel_jobsteps' AND datname = current_database()"
)


def writer_pids(conn: Conn) -> list[int]:
    return [pid for (pid,) in conn.execute(WRITER_BACKENDS).fetchall()]


def waits_on_a_lock(conn: Conn, pid: int) -> bool:
    query = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s"
    return conn.execute(query, (pid,)).fetchone() == (True,)


def writer_waits_on_a_lock(conn: Conn) -> bool:
    return any(waits_on_a_lock(conn, pid) for pid in writer_pids(conn))


def set_database(conn: Conn, setting: str, value: str) -> None:
    """``ALTER DATABASE <this test's database> SET setting = value`` (new sessions see it)."""
    name = conn.execute("SELECT current_database()").fetchone()
    assert name is not None
    conn.execute(
        sql.SQL("ALTER DATABASE {} SET {} = {}").format(
            sql.Identifier(name[0]), sql.Identifier(setting), sql.Literal(value)
        )
    )


@contextmanager
def holding(dsn: str, *statements: str) -> Iterator[Conn]:
    """A second session that ran ``statements`` in an open transaction, committed on exit."""
    with psycopg.connect(dsn) as other:
        for statement in statements:
            other.execute(statement)
        yield other


def assert_no_row_rejected(processor: JobStepsProcessor) -> None:
    stats = processor.stats()
    assert not [k for k in stats if k.startswith(("rejected_", "batch_rejected", "dropped_"))]


def assert_failed_with(processor: JobStepsProcessor, sqlstate: str) -> None:
    assert stat(processor, "write_failed") >= 1
    assert f"[{sqlstate}]" in str(processor.stats()["last_error"])


# -- lock waits, deadlocks, serialization failures --------------------------------------------


def test_a_lock_held_past_the_statement_timeout_loses_no_row(
    bridge: BridgeFactory, dsn: str, conn: Conn
) -> None:
    """ACCESS EXCLUSIVE on both tables for several statement timeouts (300 ms): every attempt
    is cancelled (57014), the whole batch waits, and after the lock goes all rows are there."""
    b = bridge(statement_timeout_ms=300)
    jobs = [run_job(b.tracer, "warm", plan(0))]
    assert b.processor.force_flush(10_000)
    with holding(dsn, "LOCK TABLE job_event, job_log IN ACCESS EXCLUSIVE MODE") as locker:
        jobs += run_jobs(b.tracer, "locked", 20)
        wait_until(lambda: stat(b.processor, "retries") >= 3, what="three cancelled writes")
        assert step_rows(locker, ["locked-0"]) == []  # the jobs are done, their rows wait
    assert b.processor.force_flush(15_000)
    assert_failed_with(b.processor, "57014")
    assert_no_row_rejected(b.processor)
    assert_rows(conn, jobs)


def test_a_deadlock_victim_batch_is_written_again(
    bridge: BridgeFactory, proxy: FaultProxy, dsn: str, conn: Conn
) -> None:
    """A real deadlock the writer loses: its batch closes a step (row lock held; the proxy
    holds the reply meanwhile), another session holding job_log waits for that row, then the
    writer's job_log insert waits for the other session. The writer waits last and has the
    shorter deadlock_timeout, so it is the victim (40P01) and writes the whole batch again."""
    set_database(conn, "deadlock_timeout", "50ms")
    b = bridge()
    jobs = [run_job(b.tracer, "warm", plan(0))]
    job, render = start_open_step(b.tracer, "deadlocked")
    assert b.processor.force_flush(10_000)
    with holding(
        dsn, "SET deadlock_timeout = '10s'", "LOCK TABLE job_log IN EXCLUSIVE MODE"
    ) as other:
        proxy.blackhole_when(server_sends=b"UPDATE 1\x00")
        closed = close_open_step(job, render)
        wait_until(lambda: proxy.mode is Mode.BLACKHOLE, what="the step close to run")
        waiter = threading.Thread(
            target=other.execute,
            args=("UPDATE job_event SET step_status = step_status WHERE job_id = 'deadlocked'",),
        )
        waiter.start()
        wait_until(lambda: waits_on_a_lock(conn, other.info.backend_pid), what="the other wait")
        proxy.set_mode(Mode.PASS)  # the writer goes on to job_log: the cycle closes
        waiter.join(10)
        assert not waiter.is_alive()
    after = run_jobs(b.tracer, "after", 3)
    assert b.processor.force_flush(15_000)
    assert_failed_with(b.processor, "40P01")
    assert_no_row_rejected(b.processor)
    assert_rows(conn, [*jobs, closed, *after])


def test_a_serialization_failure_is_written_again(
    bridge: BridgeFactory, dsn: str, conn: Conn
) -> None:
    """Repeatable read: another session updates the writer's step row after the writer's
    snapshot and commits while the writer waits on it, 40001; the batch is written again."""
    set_database(conn, "default_transaction_isolation", "repeatable read")
    b = bridge()
    jobs = [run_job(b.tracer, "warm", plan(0))]
    job, render = start_open_step(b.tracer, "serial")
    assert b.processor.force_flush(10_000)
    with holding(dsn, "UPDATE job_event SET step_status = step_status WHERE job_id = 'serial'"):
        closed = close_open_step(job, render)
        wait_until(lambda: writer_waits_on_a_lock(conn), what="the writer to wait on the row")
        assert stat(b.processor, "write_failed") == 0
    assert b.processor.force_flush(15_000)
    assert_failed_with(b.processor, "40001")
    assert_no_row_rejected(b.processor)
    assert_rows(conn, [*jobs, closed])


# -- the writer's session ends -----------------------------------------------------------------


def test_a_backend_terminated_mid_statement_is_settled_and_written_once(
    bridge: BridgeFactory, dsn: str, conn: Conn
) -> None:
    """pg_terminate_backend while the writer's batch waits on a lock, inside its transaction:
    the writer asks what became of that transaction (aborted) and writes the batch again."""
    b = bridge()
    jobs = [run_job(b.tracer, "warm", plan(0))]
    assert b.processor.force_flush(10_000)
    with holding(dsn, "LOCK TABLE job_log IN EXCLUSIVE MODE"):
        jobs += run_jobs(b.tracer, "terminated", 5)
        wait_until(lambda: writer_waits_on_a_lock(conn), what="the writer to wait on job_log")
        (pid,) = writer_pids(conn)
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        wait_until(lambda: stat(b.processor, "write_failed") >= 1, what="the writer to notice")
    assert b.processor.force_flush(15_000)
    assert "terminating connection" in str(b.processor.stats()["last_error"])
    assert_no_row_rejected(b.processor)
    assert_rows(conn, jobs)


def _restartable_server(conn: Conn) -> int:
    """The postmaster's pid, if this test may crash-restart its server (the embedded one)."""
    if os.environ.get("OTEL_JOBSTEPS_TEST_DSN"):
        pytest.skip("the server is shared (OTEL_JOBSTEPS_TEST_DSN): not restarted by a test")
    row = conn.execute("SELECT current_setting('data_directory')").fetchone()
    assert row is not None
    if "otel_jobsteps-pg-" not in row[0]:
        pytest.skip("not the embedded server of this test session: not restarted by a test")
    with open(os.path.join(row[0], "postmaster.pid")) as pid_file:
        return int(pid_file.readline())


def accepts_connections(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=2) as probe:
            return probe.execute("SELECT NOT pg_is_in_recovery()").fetchone() == (True,)
    except psycopg.OperationalError:
        return False


def test_a_server_restart_loses_nothing(bridge: BridgeFactory, server_dsn: str, dsn: str) -> None:
    """The embedded server crashes and restarts while the writer's batch waits on a lock inside
    its transaction (the lock holder's backend is SIGKILLed: the postmaster ends every session
    and recovers). That transaction is gone, its id possibly "in the future" for the server
    that came back; the writer reconnects, settles it as not committed, and the rows are exact."""
    victim = psycopg.connect(dsn)
    try:
        postmaster = _restartable_server(victim)
        b = bridge()
        jobs = [run_job(b.tracer, "warm", plan(0))]
        assert b.processor.force_flush(10_000)
        victim.execute("LOCK TABLE job_log IN EXCLUSIVE MODE")
        jobs += run_jobs(b.tracer, "crash", 5)
        with psycopg.connect(dsn, autocommit=True) as conn:
            wait_until(lambda: writer_waits_on_a_lock(conn), what="the writer to wait on job_log")
        os.kill(victim.info.backend_pid, signal.SIGKILL)
        jobs += run_jobs(b.tracer, "restart", 5)
    finally:
        with suppress(psycopg.OperationalError):
            victim.close()
    wait_until(lambda: accepts_connections(server_dsn), what="the server to be back")
    assert b.processor.force_flush(30_000)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert _restartable_server(conn) == postmaster  # a restart, not a new server
        assert stat(b.processor, "write_failed") >= 1
        assert_no_row_rejected(b.processor)
        assert_rows(conn, jobs)


def test_a_read_only_server_holds_rows_until_it_is_writable(
    bridge: BridgeFactory, proxy: FaultProxy, conn: Conn
) -> None:
    """After a failover to a server that is read-only (default_transaction_read_only on this
    database, the writer's connection cut), every write fails with 25006 and waits; once the
    database is writable again, all rows land."""
    b = bridge()
    jobs = [run_job(b.tracer, "warm", plan(0))]
    assert b.processor.force_flush(10_000)
    set_database(conn, "default_transaction_read_only", "on")
    assert proxy.cut() == 1  # the writer reconnects into the read-only database
    jobs += run_jobs(b.tracer, "read-only", 10)
    wait_until(lambda: stat(b.processor, "retries") >= 2, what="two refused writes")
    assert step_rows(conn, ["read-only-0"]) == []
    assert_failed_with(b.processor, "25006")
    set_database(conn, "default_transaction_read_only", "off")
    assert b.processor.force_flush(15_000)
    assert_no_row_rejected(b.processor)
    assert_rows(conn, jobs)


# -- a reply that never comes, and a shutdown meanwhile ----------------------------------------


def test_a_reply_that_never_comes_is_given_up_and_its_commit_settled(
    bridge: BridgeFactory, proxy: FaultProxy, conn: Conn
) -> None:
    """The proxy forwards a COMMIT and then holds everything (the server committed, the writer
    never hears it): the reply timeout (statement timeout + connect timeout, 2.3 s) ends the
    wait, the commit is confirmed on a new connection, and no row is written twice."""
    b = bridge(statement_timeout_ms=300, connect_timeout_s=2)
    jobs = [run_job(b.tracer, "warm", plan(0))]
    assert b.processor.force_flush(10_000)
    proxy.blackhole_when(client_sends=b"COMMIT")
    jobs += run_jobs(b.tracer, "silent", 10)
    wait_until(lambda: stat(b.processor, "write_failed") >= 1, what="the reply timeout")
    assert "no reply from the server within 2.3 s" in str(b.processor.stats()["last_error"])
    assert proxy.mode is Mode.BLACKHOLE
    proxy.set_mode(Mode.PASS)
    assert b.processor.force_flush(15_000)
    assert stat(b.processor, "commits_confirmed_after_error") == 1
    assert_no_row_rejected(b.processor)
    assert_rows(conn, jobs)


def test_shutdown_leaves_a_busy_connection_to_its_thread(
    bridge: BridgeFactory, dsn: str, conn: Conn
) -> None:
    """shutdown() times out while the writer's statement waits on a lock: the call returns,
    the writer's session is still there (not closed under it), and when the lock goes the
    thread finishes the batch and then closes its own connection."""
    b = bridge(shutdown_timeout_ms=200)
    jobs: list[JobRows] = []
    with holding(dsn, "LOCK TABLE job_log IN EXCLUSIVE MODE"):
        jobs += run_jobs(b.tracer, "closing", 3)
        wait_until(lambda: writer_waits_on_a_lock(conn), what="the writer to wait on job_log")
        b.processor.shutdown()
        assert stat(b.processor, "shutdown_timeout") == 1
        assert writer_waits_on_a_lock(conn)  # its connection is still in use, still open
    wait_until(lambda: not writer_pids(conn), what="the writer to close its connection")
    assert stat(b.processor, "write_failed") == 0
    assert_rows(conn, jobs)
