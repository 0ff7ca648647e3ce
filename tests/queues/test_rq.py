"""RQ adapter against real forking workers on this machine's Redis."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("rq", reason="needs the rq extra")

from opentelemetry.sdk.trace import TracerProvider
from redis import Redis
from rq import Queue, Retry
from rq.job import JobStatus
from rq.registry import StartedJobRegistry

from otel_jobsteps import JobStepsProcessor
from otel_jobsteps.integrations.rq import abandoned_job_handler
from otel_jobsteps.query import job_detail
from tests.queues.support import (
    WorkerFactory,
    WorkerProcess,
    assert_killed_run_recovered,
    assert_retried_then_completed,
    assert_time_limited,
    event_types,
    log_rows,
    wait_for_log,
    wait_for_step,
    wait_until,
)

DOMAIN = "rq-test"
JOBS = "tests.queues.apps_rq"


@pytest.fixture(scope="module")
def redis(redis_url: str) -> Iterator[Redis]:
    connection = Redis.from_url(redis_url)
    yield connection
    connection.close()


def start_rq_worker(start_worker: WorkerFactory, redis_url: str, queue: str) -> WorkerProcess:
    return start_worker(
        "-m",
        JOBS,
        env={
            "JOBSTEPS_TEST_REDIS_URL": redis_url,
            "JOBSTEPS_TEST_DOMAIN": DOMAIN,
            "JOBSTEPS_TEST_QUEUE": queue,
        },
    )


@pytest.fixture(scope="module")
def queue(redis: Redis, run_id: str, purge_redis: None) -> Iterator[Queue]:
    queue = Queue(f"jobsteps-{run_id}", connection=redis)
    yield queue
    queue.empty()


@pytest.fixture(scope="module")
def worker(start_worker: WorkerFactory, redis_url: str, queue: Queue) -> WorkerProcess:
    return start_rq_worker(start_worker, redis_url, queue.name)


def enqueue(queue: Queue, name: str, *args: Any, **options: Any) -> str:
    job_id = f"{name}-{queue.name}-{uuid.uuid4().hex[:8]}"  # carries the run id: purged after
    queue.enqueue(f"{JOBS}.{name}", *args, job_id=job_id, **options)
    return job_id


def test_fails_on_attempt_1_retries_and_succeeds_on_attempt_2(
    worker: WorkerProcess, queue: Queue, module_dsn: str
) -> None:
    job_id = enqueue(queue, "flaky", retry=Retry(max=1))

    detail = assert_retried_then_completed(
        module_dsn, DOMAIN, job_id, save_error="OSError: disk full", job_type=f"{JOBS}.flaky"
    )
    assert detail.events[0].detail == {"next_attempt": 2, "retries_left": 1, "interval_s": 0}
    assert queue.fetch_job(job_id).get_status() == JobStatus.FINISHED  # type: ignore[union-attr]
    # Fork safety: work horses forked from a worker whose writer was already live (BOOT row).
    assert job_detail(module_dsn, DOMAIN, f"boot-{worker.pid}") is not None


def test_failure_without_retries_left_is_an_error(
    worker: WorkerProcess, queue: Queue, module_dsn: str
) -> None:
    job_id = enqueue(queue, "flaky")

    detail = wait_for_log(module_dsn, DOMAIN, job_id, 1)

    assert log_rows(module_dsn, DOMAIN, job_id) == [(1, "FAILED", "error")]
    assert detail.log is not None
    assert detail.log.detail == {
        "step": "SAVE",
        "error": "OSError: disk full",
    }
    assert detail.events == ()


@pytest.mark.parametrize("swallow", [False, True], ids=["raises", "returns-late"])
def test_job_timeout_fails_the_attempt_with_time_limit(
    worker: WorkerProcess, queue: Queue, module_dsn: str, swallow: bool
) -> None:
    job_id = enqueue(queue, "slow", swallow, job_timeout=1)

    assert_time_limited(module_dsn, DOMAIN, job_id)


def test_killed_work_horse_is_stalled_and_the_next_attempt_abandons_it(
    worker: WorkerProcess, queue: Queue, module_dsn: str
) -> None:
    job_id = enqueue(queue, "killed", retry=Retry(max=1))

    assert_killed_run_recovered(module_dsn, DOMAIN, job_id, rerun_attempt=2)


def test_abandoned_job_cleanup_records_stalled(
    start_worker: WorkerFactory,
    redis_url: str,
    redis: Redis,
    run_id: str,
    module_dsn: str,
    purge_redis: None,
) -> None:
    queue = Queue(f"jobsteps-{run_id}-abandoned", connection=redis)
    doomed = start_rq_worker(start_worker, redis_url, queue.name)
    job_id = enqueue(queue, "blocked")
    wait_for_step(module_dsn, DOMAIN, job_id, "RENDER")

    doomed.kill()  # the whole worker dies: nobody tells RQ, the job stays STARTED
    wait_until(lambda: doomed.process.poll() is not None, timeout_s=10, what="the worker to die")
    # RQ's maintenance finds the execution expired once its heartbeat TTL (60 s or more) has
    # passed; run that same cleanup now with a cutoff past it.
    provider = TracerProvider()
    provider.add_span_processor(JobStepsProcessor(module_dsn))
    try:
        handler = abandoned_job_handler(DOMAIN, tracer=provider.get_tracer("maintenance"))
        StartedJobRegistry(queue.name, connection=redis).cleanup(
            timestamp=time.time() + 3600, exception_handlers=[handler]
        )
        assert provider.force_flush(10_000)
    finally:
        provider.shutdown()

    detail = job_detail(module_dsn, DOMAIN, job_id)
    assert detail is not None
    assert event_types(detail) == [(1, "STALLED")]
    assert detail.stalled_count == 1
    assert queue.fetch_job(job_id).get_status() == JobStatus.FAILED  # type: ignore[union-attr]
    queue.empty()
