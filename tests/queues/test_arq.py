"""arq adapter against real workers on this machine's Redis."""

from __future__ import annotations

import pytest

pytest.importorskip("arq", reason="needs the arq extra")


from otel_jobsteps.query import job_detail
from tests.queues.support import (
    WorkerFactory,
    WorkerProcess,
    assert_killed_run_recovered,
    assert_retried_then_completed,
    assert_time_limited,
    enqueue,
    log_rows,
    wait_for_log,
    wait_until,
)

DOMAIN = "arq-test"

# arq 0.28 passes retry_on_timeout, which redis-py 6+ deprecates (arq pins redis<6 for it).
pytestmark = pytest.mark.filterwarnings(
    "ignore:Call to '__init__' function with deprecated usage of input argument/s "
    "'retry_on_timeout':DeprecationWarning"
)


def start_arq_worker(start_worker: WorkerFactory, redis_url: str, queue: str) -> WorkerProcess:
    return start_worker(
        "-m",
        "tests.queues.apps_arq",
        env={
            "JOBSTEPS_TEST_REDIS_URL": redis_url,
            "JOBSTEPS_TEST_DOMAIN": DOMAIN,
            "JOBSTEPS_TEST_QUEUE": queue,
        },
    )


@pytest.fixture(scope="module")
def worker(
    start_worker: WorkerFactory, redis_url: str, run_id: str, purge_redis: None
) -> WorkerProcess:
    return start_arq_worker(start_worker, redis_url, f"jobsteps-{run_id}")


def test_retry_on_try_1_then_success_on_try_2(
    worker: WorkerProcess, redis_url: str, run_id: str, module_dsn: str
) -> None:
    job_id = enqueue(redis_url, f"jobsteps-{run_id}", "flaky")

    detail = assert_retried_then_completed(
        module_dsn,
        DOMAIN,
        job_id,
        save_error="arq.worker.Retry: <Retry defer 0.00s>",
        job_type="flaky",
    )
    assert detail.events[0].detail == {"next_attempt": 2, "defer_s": 0}


def test_plain_exception_is_a_final_error(
    worker: WorkerProcess, redis_url: str, run_id: str, module_dsn: str
) -> None:
    job_id = enqueue(redis_url, f"jobsteps-{run_id}", "broken")

    detail = wait_for_log(module_dsn, DOMAIN, job_id, 1)

    assert log_rows(module_dsn, DOMAIN, job_id) == [(1, "FAILED", "error")]
    assert [(s.key, s.status, s.message) for s in detail.steps] == [
        ("RENDER", "FAILED", "OSError: disk full")
    ]


def test_timeout_fails_the_attempt_with_time_limit(
    worker: WorkerProcess, redis_url: str, run_id: str, module_dsn: str
) -> None:
    job_id = enqueue(redis_url, f"jobsteps-{run_id}", "slow")

    assert_time_limited(module_dsn, DOMAIN, job_id)


def test_killed_worker_is_stalled_and_the_next_try_abandons_it(
    start_worker: WorkerFactory, redis_url: str, run_id: str, module_dsn: str, purge_redis: None
) -> None:
    queue = f"jobsteps-{run_id}-killed"  # its own queue: the module's worker must not take it
    doomed = start_arq_worker(start_worker, redis_url, queue)
    job_id = enqueue(redis_url, queue, "killed")
    wait_until(lambda: doomed.process.poll() is not None, timeout_s=30, what="the worker to die")

    # Another worker takes the job once the dead one's in-progress key expires (2 + 10 s).
    start_arq_worker(start_worker, redis_url, queue)
    assert_killed_run_recovered(module_dsn, DOMAIN, job_id, rerun_attempt=2, timeout_s=40)
    assert job_detail(module_dsn, DOMAIN, job_id, 1) is not None
