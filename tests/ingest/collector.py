"""What the ingest tests share: the collect process they start and the rows they compare."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import psycopg

# Every column but the identity and the heartbeat (the processor refreshes it while a step is
# open; the receiver writes closed rows) in a stable order; %s: a LIKE pattern of job ids. Log
# lines of one instant delivered in different requests have no order (documented): by text.
EVENT_ROWS = (
    "SELECT domain, job_id, job_type, attempt, type, step_key, step_status, detail, message,"
    " trace_id, span_id, execution_id, created_at, ended_at FROM job_event WHERE job_id LIKE %s"
    " ORDER BY domain, job_id, attempt, created_at, type, step_key,"
    " CASE WHEN type = 'LOG' THEN message END, id"
)


LOG_ROWS = (
    "SELECT domain, job_id, job_type, attempt, status, reason, detail, trace_id, created_at"
    " FROM job_log WHERE job_id LIKE %s ORDER BY domain, job_id, attempt"
)


def table_rows(dsn: str, jobs: str = "%") -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(job_event rows, job_log rows) without ids of the jobs whose id is LIKE ``jobs``."""
    with psycopg.connect(dsn) as conn:
        return (
            conn.execute(EVENT_ROWS, (jobs,)).fetchall(),
            conn.execute(LOG_ROWS, (jobs,)).fetchall(),
        )


@dataclass
class Collector:
    """One ``otel-jobsteps collect`` process."""

    process: subprocess.Popen[bytes]
    url: str
    log_path: str
    grpc_port: int | None = None  # None: the test chose --grpc-listen itself

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def traces_url(self) -> str:
        return f"{self.url}/v1/traces"

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as file:
            return file.read()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=30)


CollectorFactory = Callable[..., Collector]


def run_collect(dsn: str, *options: str) -> subprocess.CompletedProcess[str]:
    """``otel-jobsteps collect`` run to its end (one that refuses to start), its output kept."""
    return subprocess.run(
        [sys.executable, "-m", "otel_jobsteps.cli", "collect", "--dsn", dsn, *options],
        capture_output=True,
        text=True,
        timeout=60,
    )


def refuses_connections(url: str) -> bool:
    """Whether nothing listens at ``url``'s host and port any more (a receiver shutting down)."""
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False
