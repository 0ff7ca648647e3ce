"""BullMQ (Python package) adapter against real workers on this machine's Redis."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

pytest.importorskip("bullmq", reason="needs the bullmq extra")


from tests.queues.support import (
    WorkerFactory,
    WorkerProcess,
    add_job,
    assert_killed_run_recovered,
    assert_retried_then_completed,
    event_types,
    job_state,
    log_rows,
    obliterate,
    run,
    wait_for_log,
    wait_until,
)

DOMAIN = "bullmq-test"
# A short lock and stalled-check interval so lost locks show within seconds.
FAST_LOCKS = {"lockDuration": 1000, "stalledInterval": 1000}


def start_bullmq_worker(
    start_worker: WorkerFactory, redis_url: str, queue: str, **options: Any
) -> WorkerProcess:
    worker = start_worker(
        "-m",
        "tests.queues.apps_bullmq",
        env={
            "JOBSTEPS_TEST_REDIS_URL": redis_url,
            "JOBSTEPS_TEST_DOMAIN": DOMAIN,
            "JOBSTEPS_TEST_QUEUE": queue,
            "JOBSTEPS_TEST_BULLMQ_OPTS": json.dumps(options),
        },
    )
    wait_until(lambda: "worker ready" in worker.log(), timeout_s=30, what="the bullmq worker")
    return worker


@pytest.fixture
def queue_name(redis_url: str, run_id: str, purge_redis: None) -> Any:
    name = f"jobsteps-{run_id}-{uuid.uuid4().hex[:6]}"
    yield name
    run(obliterate(redis_url, name))


def test_fails_on_attempt_1_retries_and_succeeds_on_attempt_2(
    start_worker: WorkerFactory, redis_url: str, queue_name: str, module_dsn: str
) -> None:
    worker = start_bullmq_worker(start_worker, redis_url, queue_name)
    job_id = run(add_job(redis_url, queue_name, "flaky", {"attempts": 2}))

    detail = assert_retried_then_completed(
        module_dsn, DOMAIN, job_id, save_error="OSError: disk full", job_type="flaky"
    )
    assert detail.events[0].detail == {"next_attempt": 2, "attempts": 2}
    assert run(job_state(redis_url, queue_name, job_id))[0] == "completed"
    worker.stop()


def test_run_that_outlives_its_lock_is_failed_reclaimed_and_stalled(
    start_worker: WorkerFactory, redis_url: str, queue_name: str, module_dsn: str
) -> None:
    worker = start_bullmq_worker(
        start_worker, redis_url, queue_name, maxStalledCount=0, **FAST_LOCKS
    )
    job_id = run(add_job(redis_url, queue_name, "blocking", {}))

    detail = wait_until(
        lambda: (d := wait_for_log(module_dsn, DOMAIN, job_id, 1)).stalled_count and d,
        timeout_s=30,
        what="the STALLED event",
    )

    # The run finished after its lock expired: BullMQ could not complete it, its stalled-job
    # check took the job back and, past maxStalledCount=0, failed it.
    assert log_rows(module_dsn, DOMAIN, job_id) == [(1, "FAILED", "reclaimed")]
    assert event_types(detail) == [(1, "STALLED")]
    assert wait_until(
        lambda: (s := run(job_state(redis_url, queue_name, job_id)))[0] == "failed" and s,
        timeout_s=15,
        what="BullMQ to fail the job",
    ) == ("failed", "job stalled more than allowable limit")
    worker.stop()


def test_killed_worker_is_stalled_and_rerun_as_the_same_attempt(
    start_worker: WorkerFactory, redis_url: str, queue_name: str, module_dsn: str
) -> None:
    doomed = start_bullmq_worker(start_worker, redis_url, queue_name, **FAST_LOCKS)
    job_id = run(add_job(redis_url, queue_name, "killed", {"attempts": 2}))
    wait_until(lambda: doomed.process.poll() is not None, timeout_s=30, what="the worker to die")

    # Another worker's stalled-job check finds the lock expired and moves the job back to wait.
    rescuer = start_bullmq_worker(start_worker, redis_url, queue_name, **FAST_LOCKS)
    assert_killed_run_recovered(module_dsn, DOMAIN, job_id, rerun_attempt=1)
    assert run(job_state(redis_url, queue_name, job_id))[0] == "completed"
    rescuer.stop()
