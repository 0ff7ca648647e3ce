"""Helpers the tests share: test databases, a typed tracing factory, reading rows, waiting.

Fixtures live in the plugins of `tests.plugins` (registered in tests/conftest.py); test modules
import helpers from here, never from a conftest or from another test module.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from opentelemetry.trace import Tracer
from psycopg import sql
from psycopg.conninfo import make_conninfo

from benchmarks.common import free_port as free_port  # one definition (see there)
from otel_jobsteps import JobStepsProcessor
from otel_jobsteps._cli.demo import record_seed_story

# OTEL_JOBSTEPS_TEST_LAYOUT=partitioned: the interval the test databases are partitioned by.
PARTITION_INTERVAL = timedelta(days=1)


def database_dsn(server_dsn: str, name: str) -> str:
    return make_conninfo(server_dsn, dbname=name)


def create_database(server_dsn: str, name: str, template: str | None = None) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            query = sql.SQL("{} TEMPLATE {}").format(query, sql.Identifier(template))
        conn.execute(query)


def drop_database(server_dsn: str, name: str) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


TracingFactory = Callable[..., tuple[Tracer, JobStepsProcessor]]


def rows(conn: psycopg.Connection[Any], query: str, *params: Any) -> list[tuple[Any, ...]]:
    return conn.execute(query, params).fetchall()  # type: ignore[arg-type]


T = TypeVar("T")


_ROWS_READ = (
    "SELECT COALESCE(sum(COALESCE(idx_tup_fetch, 0) + seq_tup_read), 0)"
    " FROM pg_stat_xact_user_tables WHERE relname LIKE 'job%%'"
)


def job_rows_read(conn: psycopg.Connection[Any], run: Callable[[], object]) -> int:
    """Rows ``run`` reads from the job tables (index fetches and scans), inside the
    transaction the caller opened: the counters' change around it. Not their value after it:
    a backend sends its counts to the server's at most once a second, so until then they also
    hold what earlier transactions read (the retry tax's triggers read the rows inserts write)."""
    (before,) = conn.execute(_ROWS_READ).fetchone() or (0,)
    run()
    (after,) = conn.execute(_ROWS_READ).fetchone() or (0,)
    return int(after) - int(before)


def wait_until(
    probe: Callable[[], T | None],
    *,
    what: str,
    timeout_s: float = 30.0,
    max_interval_s: float = 0.1,
) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` at the deadline.

    For what another thread, process or server does, where no event can be awaited.
    """
    deadline = time.monotonic() + timeout_s
    interval = 0.002
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval)
        interval = min(interval * 1.5, max_interval_s)


def record_two_attempts(tracing: TracingFactory) -> str:
    """The seed story (`record_seed_story`, with a STALLED event in each RENDER) as job
    render / 42: attempt 1 fails to save, attempt 2 completes; returns the job id."""
    tracer, processor = tracing()
    record_seed_story(tracer, "42", domain="render", stalled=True)
    assert processor.force_flush(10_000)
    return "42"


def open_step(
    conn: psycopg.Connection[Any],
    job_id: str,
    *,
    age: str,
    heartbeat_age: str | None = None,
    attempt: int = 1,
    key: str = "SAVE",
) -> None:
    """An open STEP row started ``age`` ago, last refreshed ``heartbeat_age`` ago (or never)."""
    conn.execute(
        "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,"
        " execution_id, created_at, heartbeat_at)"
        " VALUES ('render', %s, 'thumbnail', %s, 'STEP', %s, 'RUNNING', 'worker-1',"
        " now() - %s::interval, now() - %s::interval)",
        (job_id, attempt, key, age, heartbeat_age),
    )


def finished_attempt(conn: psycopg.Connection[Any], job_id: str, attempt: int, *, age: str) -> None:
    """A closed step, an event and the final row of an attempt that ended ``age`` ago."""
    params = {"job_id": job_id, "attempt": attempt, "age": age}
    conn.execute(
        "INSERT INTO job_event (domain, job_id, attempt, type, step_key, step_status, created_at,"
        " ended_at) VALUES ('render', %(job_id)s, %(attempt)s, 'STEP', 'SAVE', 'COMPLETED',"
        " now() - %(age)s::interval, now() - %(age)s::interval)",
        params,
    )
    conn.execute(
        "INSERT INTO job_event (domain, job_id, attempt, type, created_at)"
        " VALUES ('render', %(job_id)s, %(attempt)s, 'STALLED', now() - %(age)s::interval)",
        params,
    )
    conn.execute(
        "INSERT INTO job_log (domain, job_id, attempt, status, created_at)"
        " VALUES ('render', %(job_id)s, %(attempt)s, 'COMPLETED', now() - %(age)s::interval)",
        params,
    )


def counts(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return rows(
        conn,
        "SELECT job_id, attempt, count(*) FROM job_event GROUP BY 1, 2 ORDER BY 1, 2",
    )


def writer_processes() -> list[int]:
    """Pids of this process's children that run the writer process (``writer="process"``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and b"otel_jobsteps._live.writer_process" in command:
            found.append(int(entry.name))
    return found


def run_instrumented(script: Path, **otel: str) -> subprocess.CompletedProcess[str]:
    """``script`` under ``opentelemetry-instrument``, with none of this process's ``OTEL_*``
    variables but ``otel``; fails the test if it does not exit 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONWARN"))}
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "opentelemetry-instrument"),
            sys.executable,
            str(script),
        ],
        capture_output=True,
        text=True,
        env={**env, **otel},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done
