"""Retry and cancel through arq against a real worker on this machine's Redis."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

pytest.importorskip("arq", reason="needs the arq extra")

from arq.connections import RedisSettings, create_pool
from arq.constants import job_key_prefix
from arq.jobs import Job, JobStatus
from redis import Redis

from otel_jobsteps.actions import load_actions, run_action
from tests.actions.support import action_rows, actions_file, cli
from tests.queues.support import (
    WorkerFactory,
    WorkerProcess,
    log_rows,
    step_rows,
    wait_for_log,
    wait_for_step,
)

DOMAIN = "arq-actions"

pytestmark = pytest.mark.filterwarnings(  # as in tests/queues/test_arq.py
    "ignore:Call to '__init__' function with deprecated usage of input argument/s "
    "'retry_on_timeout':DeprecationWarning"
)


def start_arq_worker(start_worker: WorkerFactory, redis_url: str, queue: str) -> WorkerProcess:
    env = {"JOBSTEPS_TEST_REDIS_URL": redis_url, "JOBSTEPS_TEST_DOMAIN": DOMAIN}
    return start_worker("-m", "tests.actions.apps_arq", env={**env, "JOBSTEPS_TEST_QUEUE": queue})


def enqueue(redis_url: str, queue: str, name: str, *args: object, **kwargs: object) -> str:
    job_id = f"{name}-{queue}-{uuid.uuid4().hex[:8]}"  # carries the run id: purged after

    async def send() -> None:
        pool = await create_pool(RedisSettings.from_dsn(redis_url))
        try:
            await pool.enqueue_job(name, *args, _job_id=job_id, _queue_name=queue, **kwargs)
        finally:
            await pool.aclose()

    asyncio.run(send())
    return job_id


def status(redis_url: str, queue: str, job_id: str) -> JobStatus:
    async def read() -> JobStatus:
        pool = await create_pool(RedisSettings.from_dsn(redis_url))
        try:
            return await Job(job_id, pool, _queue_name=queue).status()
        finally:
            await pool.aclose()

    return asyncio.run(read())


def config(tmp_path: Path, redis_url: str, queue: str) -> Path:
    return actions_file(tmp_path, DOMAIN, "arq", url=redis_url, queue_name=queue)


def test_retry_re_enqueues_the_failed_job_as_try_2_with_its_arguments(
    start_worker: WorkerFactory, redis_url: str, run_id: str, module_dsn: str, tmp_path: Path,
    purge_redis: None,
) -> None:  # fmt: skip
    queue = f"jobsteps-{run_id}-arq"
    start_arq_worker(start_worker, redis_url, queue)
    job_id = enqueue(redis_url, queue, "fails_once", "poster", size=3)
    wait_for_log(module_dsn, DOMAIN, job_id, 1)

    assert (
        cli(
            module_dsn,
            "retry",
            DOMAIN,
            job_id,
            "--actions",
            str(config(tmp_path, redis_url, queue)),
        )
        == 0
    )

    wait_for_log(module_dsn, DOMAIN, job_id, 2)
    assert log_rows(module_dsn, DOMAIN, job_id) == [(1, "FAILED", "error"), (2, "COMPLETED", None)]
    assert [row[:3] for row in step_rows(module_dsn, DOMAIN, job_id)][2:] == [
        (2, "RENDER", "COMPLETED"),
        (2, "SAVE", "COMPLETED"),
    ]
    [(_, detail, _)] = action_rows(module_dsn, DOMAIN, job_id)
    assert detail["answer"] == "enqueued fails_once again as try 2"

    # Then running: cancel is refused unless forced, and forced it aborts the run.
    blocked = enqueue(redis_url, queue, "blocked")
    wait_for_step(module_dsn, DOMAIN, blocked, "RENDER")
    actions = load_actions(config(tmp_path, redis_url, queue))
    unforced = run_action(module_dsn, actions, "cancel", DOMAIN, blocked, actor="test")
    forced = run_action(module_dsn, actions, "cancel", DOMAIN, blocked, actor="t", force=True)
    assert unforced.outcome == "refused"
    assert (forced.outcome, forced.answer) == ("done", "aborted by its worker")


def test_cancel_removes_a_waiting_job(
    redis_url: str, run_id: str, module_dsn: str, tmp_path: Path, purge_redis: None
) -> None:
    idle = f"jobsteps-{run_id}-arq-idle"  # no worker: jobs wait
    job_id = enqueue(redis_url, idle, "fails_once", "x", size=1)

    assert (
        cli(
            module_dsn,
            "cancel",
            DOMAIN,
            job_id,
            "--actions",
            str(config(tmp_path, redis_url, idle)),
        )
        == 0
    )

    assert status(redis_url, idle, job_id) == JobStatus.not_found
    [(_, detail, _)] = action_rows(module_dsn, DOMAIN, job_id)
    assert detail["answer"] == f"removed from {idle} (queued)"
    assert log_rows(module_dsn, DOMAIN, job_id) == [(1, "FAILED", "cancelled")]


def test_a_refused_retry_keeps_the_result_that_holds_the_arguments(
    start_worker: WorkerFactory, redis_url: str, run_id: str, module_dsn: str, tmp_path: Path,
    purge_redis: None,
) -> None:  # fmt: skip
    """The retry deletes the failed job's result to enqueue it again: when arq refuses the
    enqueue, the result (the only copy of the function and arguments) is put back."""
    queue = f"jobsteps-{run_id}-arq-kept"
    start_arq_worker(start_worker, redis_url, queue)
    job_id = enqueue(redis_url, queue, "fails_once", "poster", size=3)
    wait_for_log(module_dsn, DOMAIN, job_id, 1)
    actions = load_actions(config(tmp_path, redis_url, queue))
    with Redis.from_url(redis_url) as redis:
        redis.set(job_key_prefix + job_id, b"enqueued meanwhile")  # arq refuses the id
        refused = run_action(module_dsn, actions, "retry", DOMAIN, job_id, actor="t")
        assert status(redis_url, queue, job_id) == JobStatus.complete  # its result is back
        redis.delete(job_key_prefix + job_id)

    done = run_action(module_dsn, actions, "retry", DOMAIN, job_id, actor="t")

    assert (refused.outcome, refused.answer) == (
        "refused",
        "arq refused the id: a job with it was enqueued meanwhile",
    )
    assert (done.outcome, done.answer) == ("done", "enqueued fails_once again as try 2")
    wait_for_log(module_dsn, DOMAIN, job_id, 2)
    assert log_rows(module_dsn, DOMAIN, job_id) == [(1, "FAILED", "error"), (2, "COMPLETED", None)]
