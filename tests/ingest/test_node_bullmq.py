"""A real Node.js BullMQ worker (bullmq-otel, the OTel SDK, its OTLP exporter) against this
machine's Redis and a running ``collect``: the rows the Python BullMQ adapter records."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from otel_jobsteps import job_detail
from tests.helpers import wait_until
from tests.ingest.collector import Collector, CollectorFactory
from tests.queues.support import (
    REDIS_URL,
    REQUIRE_BROKERS,
    WorkerProcess,
    assert_retried_then_completed,
    broker,
    step_rows,
    wait_for_log,
    wait_for_step,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node-bullmq"


@pytest.fixture(scope="session")
def node_example() -> Path:
    """The example with its npm packages installed (``npm ci`` from the lock file, once)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        (pytest.fail if REQUIRE_BROKERS else pytest.skip)("needs Node.js 20 and npm")
    if not (EXAMPLE / "node_modules" / ".package-lock.json").exists():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error", "--cache", ".npm-cache"],
            cwd=EXAMPLE,
            check=True,
            timeout=600,
        )
    return EXAMPLE


@pytest.fixture
def queue(node_example: Path) -> Iterator[str]:
    """A queue of its own on this machine's Redis; its keys are deleted after the test."""
    url = broker(REDIS_URL, "Redis", default_port=6379, hello=b"PING\r\n", expect=b"+PONG")
    name = f"jobsteps-node-{uuid.uuid4().hex[:8]}"
    yield name
    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(f"bull:{name}:*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


NodeWorker = Callable[..., WorkerProcess]


@pytest.fixture
def node_worker(node_example: Path, queue: str, tmp_path: Path) -> Iterator[NodeWorker]:
    started: list[WorkerProcess] = []

    def start(collector: Collector, **env: str) -> WorkerProcess:
        worker = WorkerProcess(
            ["node", str(node_example / "worker.js")],
            {
                **os.environ,
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector.traces_url,
                "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": f"{collector.url}/v1/logs",
                "REDIS_URL": REDIS_URL,
                "QUEUE": queue,
                **env,
            },
            tmp_path / "worker.log",
        )
        started.append(worker)

        def ready() -> bool:
            if worker.process.poll() is not None:
                raise AssertionError(f"the Node worker exited: {worker.log()}")
            return "worker ready" in worker.log()

        wait_until(ready, what="the Node worker")
        return worker

    yield start
    for worker in started:
        worker.stop(grace_s=15)


def enqueue(queue: str, name: str, job_id: str, attempts: int = 1, backoff_ms: int = 0) -> None:
    subprocess.run(
        ["node", "enqueue.js", name, job_id, str(attempts), str(backoff_ms)],
        cwd=EXAMPLE,
        env={**os.environ, "REDIS_URL": REDIS_URL, "QUEUE": queue},
        check=True,
        timeout=60,
    )


def test_failed_attempt_then_retry_gives_the_python_adapters_rows(
    start_collect: CollectorFactory, node_worker: NodeWorker, queue: str, dsn: str
) -> None:
    node_worker(start_collect(dsn))
    enqueue(queue, "flaky", "flaky-1", attempts=2)

    # Domain = the queue's name, type = the job's name; attempt 1 FAILED retry (BullMQ's
    # "retry" span became the RETRY_SCHEDULED event), attempt 2 COMPLETED.
    detail = assert_retried_then_completed(
        dsn, queue, "flaky-1", save_error="Error: disk full", job_type="flaky"
    )
    assert detail.events[0].detail == {"next_attempt": 2}
    assert detail.log is not None
    assert detail.log.status == "COMPLETED"
    # RENDER's end reads later than SAVE's millisecond start (Node's clocks): RENDER is still
    # closed by its own end, with its progress.
    first = job_detail(dsn, queue, "flaky-1", 1)
    assert first is not None
    assert [(s.key, s.detail) for s in first.steps] == [("RENDER", {"pct": 100}), ("SAVE", None)]


def test_the_workers_log_lines_are_under_their_steps(
    start_collect: CollectorFactory, node_worker: NodeWorker, queue: str, dsn: str
) -> None:
    # The worker logs through the Node Logs SDK and its OTLP log exporter, batched apart from
    # its spans: each line lands in the step whose span was active when it was emitted.
    node_worker(start_collect(dsn))
    enqueue(queue, "flaky", "flaky-logs", attempts=2)
    assert_retried_then_completed(
        dsn, queue, "flaky-logs", save_error="Error: disk full", job_type="flaky"
    )

    def lines(attempt: int) -> dict[str | None, list[tuple[str | None, str | None]]] | None:
        """The attempt's lines by step, in time order. Node's Logs SDK stamps records with
        Date.now() (whole milliseconds), so lines of two steps often tie, and collect may write
        tied lines in either id order: the order between steps is the time's, not asserted."""
        found = job_detail(dsn, queue, "flaky-logs", attempt).logs
        if len(found) < 3:
            return None
        assert [line.time for line in found] == sorted(line.time for line in found)
        steps: dict[str | None, list[tuple[str | None, str | None]]] = {}
        for line in found:
            steps.setdefault(line.step_key, []).append((line.severity, line.message))
        return steps

    assert wait_until(lambda: lines(1), what="attempt 1's log lines") == {
        None: [("INFO", "attempt 1 of flaky-logs")],
        "RENDER": [("INFO", "rendering 3 frames")],
        "SAVE": [("ERROR", "disk full while saving")],
    }
    assert wait_until(lambda: lines(2), what="attempt 2's log lines") == {
        None: [("INFO", "attempt 2 of flaky-logs")],
        "RENDER": [("INFO", "rendering 3 frames")],
        "SAVE": [("INFO", "saved")],
    }
    first = {line.message: line for line in job_detail(dsn, queue, "flaky-logs", 1).logs}
    assert first["rendering 3 frames"].attributes == {"frames": 3}
    assert first["disk full while saving"].attributes == {"disk": "/data"}


def test_a_retry_after_its_first_attempt_settled_is_recorded(
    start_collect: CollectorFactory, node_worker: NodeWorker, queue: str, dsn: str
) -> None:
    # BullMQ runs every attempt in the producer's trace; the 6 s backoff outlasts the 1 s
    # settle window, so attempt 1 is settled before attempt 2 starts: attempt 2 is new work.
    node_worker(start_collect(dsn, "--settle-after", "1s"))
    enqueue(queue, "flaky", "flaky-late", attempts=2, backoff_ms=6000)
    assert_retried_then_completed(
        dsn, queue, "flaky-late", save_error="Error: disk full", job_type="flaky"
    )
    with psycopg.connect(dsn) as conn:
        settled, retried = conn.execute(
            "SELECT a.touched_at, (SELECT min(e.created_at) FROM job_event AS e"
            "  WHERE e.domain = a.domain AND e.job_id = a.job_id AND e.attempt = 2)"
            " FROM otlp_attempt AS a"
            " WHERE a.domain = %s AND a.job_id = 'flaky-late' AND a.attempt = 1 AND a.settled",
            (queue,),
        ).fetchone() or (None, None)
    assert settled is not None
    assert retried is not None
    assert settled < retried


def test_running_step_is_visible_before_it_ends(
    start_collect: CollectorFactory,
    node_worker: NodeWorker,
    queue: str,
    dsn: str,
    tmp_path: Path,
) -> None:
    hold = tmp_path / "release"
    node_worker(start_collect(dsn), HOLD_FILE=str(hold))
    enqueue(queue, "slow", "slow-1")

    running = wait_for_step(dsn, queue, "slow-1", "RENDER", status="RUNNING")
    assert running.log is None  # the job has not ended: only its start markers arrived
    assert step_rows(dsn, queue, "slow-1") == [(1, "RENDER", "RUNNING", None)]
    hold.touch()
    wait_for_log(dsn, queue, "slow-1", 1)
    assert step_rows(dsn, queue, "slow-1") == [
        (1, "RENDER", "COMPLETED", None),
        (1, "SAVE", "COMPLETED", None),
    ]
