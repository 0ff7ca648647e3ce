"""Waiting for the workers' rows and asserting what each queue must have recorded.

The assertion helpers state the outcome paths every adapter maps the same way; a test adds
what is particular to its queue (event details, the queue's own view of the job).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psycopg
import pytest

from otel_jobsteps.query import JobDetail, job_detail
from tests.helpers import wait_until

T = TypeVar("T")

_STEP_ROWS = (
    "SELECT attempt, step_key, step_status, message FROM job_event"
    " WHERE domain = %s AND job_id = %s AND type = 'STEP' ORDER BY id"
)
_LOG_ROWS = (
    "SELECT attempt, status, reason FROM job_log WHERE domain = %s AND job_id = %s ORDER BY attempt"
)


def wait_for_log(
    dsn: str, domain: str, job_id: str, attempt: int, *, timeout_s: float = 30.0
) -> JobDetail:
    """The job's detail once ``attempt`` has its job_log row."""

    def probe() -> JobDetail | None:
        detail = job_detail(dsn, domain, job_id, attempt)
        return detail if detail is not None and detail.log is not None else None

    what = f"job_log of {job_id} attempt {attempt}"
    return wait_until(probe, what=what, timeout_s=timeout_s, max_interval_s=0.5)


def wait_for_step(
    dsn: str,
    domain: str,
    job_id: str,
    key: str,
    *,
    status: str = "RUNNING",
    timeout_s: float = 30.0,
) -> JobDetail:
    """The job's detail once its latest attempt has step ``key`` in ``status``."""

    def probe() -> JobDetail | None:
        detail = job_detail(dsn, domain, job_id)
        if detail is None:
            return None
        return detail if any(s.key == key and s.status == status for s in detail.steps) else None

    what = f"step {key} {status} of {job_id}"
    return wait_until(probe, what=what, timeout_s=timeout_s, max_interval_s=0.5)


def step_rows(dsn: str, domain: str, job_id: str) -> list[tuple[Any, ...]]:
    """(attempt, step_key, step_status, message) of every STEP row, in insert order."""
    return _job_rows(dsn, _STEP_ROWS, domain, job_id)


def log_rows(dsn: str, domain: str, job_id: str) -> list[tuple[Any, ...]]:
    """(attempt, status, reason) of every job_log row of the job."""
    return _job_rows(dsn, _LOG_ROWS, domain, job_id)


def _job_rows(dsn: str, query: str, domain: str, job_id: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query, (domain, job_id)).fetchall()  # type: ignore[arg-type]


def event_types(detail: JobDetail) -> list[tuple[int, str]]:
    return [(event.attempt, event.type) for event in detail.events]


def assert_retried_then_completed(
    dsn: str, domain: str, job_id: str, *, save_error: str, job_type: str
) -> JobDetail:
    """Attempt 1 failed in SAVE with ``save_error`` and was retried; attempt 2 completed.

    Returns attempt 2's detail.
    """
    detail = wait_for_log(dsn, domain, job_id, 2)
    assert step_rows(dsn, domain, job_id) == [
        (1, "RENDER", "COMPLETED", None),
        (1, "SAVE", "FAILED", save_error),
        (2, "RENDER", "COMPLETED", None),
        (2, "SAVE", "COMPLETED", None),
    ]
    assert log_rows(dsn, domain, job_id) == [(1, "FAILED", "retry"), (2, "COMPLETED", None)]
    assert detail.job_type == job_type
    assert [s.key for s in detail.steps] == ["RENDER", "SAVE"]
    assert event_types(detail) == [(1, "RETRY_SCHEDULED")]
    return detail


def assert_time_limited(dsn: str, domain: str, job_id: str) -> JobDetail:
    """Attempt 1 ended FAILED ``time_limit`` with its RENDER step failed."""
    detail = wait_for_log(dsn, domain, job_id, 1)
    assert log_rows(dsn, domain, job_id) == [(1, "FAILED", "time_limit")]
    assert [(s.key, s.status) for s in detail.steps] == [("RENDER", "FAILED")]
    return detail


def assert_killed_run_recovered(
    dsn: str, domain: str, job_id: str, *, rerun_attempt: int, timeout_s: float = 30.0
) -> JobDetail:
    """A run of attempt 1 killed in RENDER is STALLED; ``rerun_attempt`` then completed.

    ``rerun_attempt`` 1 is the same attempt run again, 2 the next attempt; either way the rerun
    closed the dead run's open step as abandoned, and every earlier attempt ends abandoned.
    """
    detail = wait_for_log(dsn, domain, job_id, rerun_attempt, timeout_s=timeout_s)
    assert step_rows(dsn, domain, job_id) == [
        (1, "RENDER", "FAILED", "abandoned"),
        (rerun_attempt, "RENDER", "COMPLETED", None),
        (rerun_attempt, "SAVE", "COMPLETED", None),
    ]
    abandoned = [(attempt, "FAILED", "abandoned") for attempt in range(1, rerun_attempt)]
    assert log_rows(dsn, domain, job_id) == [*abandoned, (rerun_attempt, "COMPLETED", None)]
    assert event_types(detail) == [(1, "STALLED")]
    assert detail.stalled_count == 1
    return detail


REPO = Path(__file__).resolve().parents[2]


REDIS_URL = os.environ.get("OTEL_JOBSTEPS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


AMQP_URL = os.environ.get("OTEL_JOBSTEPS_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")


WORKER_WATCHDOG_S = 120.0


# CI sets this: there a missing broker is a failure, not a reason to skip.
REQUIRE_BROKERS = os.environ.get("OTEL_JOBSTEPS_REQUIRE_BROKERS") == "1"


def broker(url: str, needs: str, *, default_port: int, hello: bytes, expect: bytes) -> str:
    """``url`` when its server answers ``hello`` with ``expect``; else skip, saying why."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or default_port
    missing = pytest.fail if REQUIRE_BROKERS else pytest.skip
    try:
        with socket.create_connection((host, port), timeout=1.0) as sock:
            sock.settimeout(1.0)
            sock.sendall(hello)
            answered = sock.recv(16).startswith(expect)
    except OSError as error:
        missing(f"needs {needs}: nothing answers on {host}:{port} ({error})")
    if not answered:
        missing(f"needs {needs}: {host}:{port} answered, but not as expected")
    return url


def descendants(root: int) -> list[int]:
    """Pids of the processes below ``root`` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


class WorkerProcess:
    """A worker subprocess in its own process group, killed by a watchdog if it outlives it."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._watchdog = threading.Timer(WORKER_WATCHDOG_S, self.kill)
        self._watchdog.daemon = True
        self._watchdog.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)  # the group this subprocess leads

    def kill(self) -> None:
        """KILL the group and every descendant (RQ's work horse leads a group of its own)."""
        children = descendants(self.process.pid)
        self.signal_group(signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def stop(self, grace_s: float = 10.0) -> None:
        self._watchdog.cancel()
        if self.process.poll() is None:
            self.signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(grace_s)
        self.kill()  # whatever the leader left behind in its group
        if self.process.poll() is None:
            self.process.wait(5)
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


WorkerFactory = Callable[..., WorkerProcess]


def start_celery_worker(
    start_worker: WorkerFactory, app_module: str, hostname: str, env: dict[str, str]
) -> WorkerProcess:
    """A prefork Celery worker of ``app_module`` (one process), once it says it is ready."""
    process = start_worker(
        "-m", "celery", "-A", app_module, "worker",
        "--pool", "prefork", "--concurrency", "1", "--loglevel", "INFO",
        "--without-heartbeat", "--without-gossip", "--without-mingle",
        "--hostname", f"{hostname}@%h",
        env=env,
    )  # fmt: skip
    wait_until(
        lambda: " ready." in process.log() or process.process.poll() is not None,
        timeout_s=60,
        what="the celery worker to be ready",
    )
    assert process.process.poll() is None, process.log()
    return process


def enqueue(redis_url: str, queue: str, name: str, *args: Any) -> str:
    """Enqueue an arq job (arq imported here: it is an optional extra)."""
    from arq.connections import RedisSettings, create_pool

    job_id = f"{name}-{queue}-{uuid.uuid4().hex[:8]}"  # carries the run id: purged after

    async def send() -> None:
        pool = await create_pool(RedisSettings.from_dsn(redis_url))
        try:
            job = await pool.enqueue_job(name, *args, _job_id=job_id, _queue_name=queue)
            assert job is not None
        finally:
            await pool.aclose()

    asyncio.run(send())
    return job_id


def run(coroutine: Any) -> Any:
    """Run a BullMQ client coroutine to its end."""
    return asyncio.run(coroutine)


async def add_job(redis_url: str, queue: str, name: str, options: dict[str, Any]) -> str:
    from bullmq import Queue  # an optional extra: imported by the tests that need it

    job_id = f"{name}-{uuid.uuid4().hex[:8]}"
    client = Queue(queue, {"connection": redis_url})
    try:
        await client.add(name, {}, {"jobId": job_id, **options})
    finally:
        await client.close()
    return job_id


async def job_state(redis_url: str, queue: str, job_id: str) -> tuple[str, str | None]:
    from bullmq import Job, Queue  # an optional extra: imported by the tests that need it

    client = Queue(queue, {"connection": redis_url})
    try:
        job = await Job.fromId(client, job_id)
        assert job is not None
        return await job.getState(), job.failedReason
    finally:
        await client.close()


async def obliterate(redis_url: str, queue: str) -> None:
    from bullmq import Queue  # an optional extra: imported by the tests that need it

    client = Queue(queue, {"connection": redis_url})
    try:
        await client.obliterate({"force": True})
    finally:
        await client.close()
