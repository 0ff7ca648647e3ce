"""arq. Retry re-enqueues a failed job under its own id with ``_job_try`` N + 1 (the worker
takes it over its own try counter, so attempt N + 1 is recorded): its function and arguments
come from the kept result, which arq must delete first (it refuses an id whose result exists)
and which is put back if the enqueue is refused; a job whose result expired cannot be retried.
arq still refuses tries past max_tries.
Cancel removes a queued or deferred job from the queue; a running one, with force, is aborted
(``Job.abort``), which only workers with ``allow_abort_jobs = True`` honour."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from arq.connections import ArqRedis, RedisSettings, create_pool
from arq.constants import job_key_prefix, result_key_prefix
from arq.jobs import Job, JobStatus

from ._loop import run_coroutine
from .answers import DONE, NOT_FOUND, REFUSED, Answer
from .config import DomainConfig

__all__ = ["cancel", "retry"]

ABORT_WAIT_S = 5.0
_Action = Callable[[ArqRedis, Job, str], Awaitable[Answer]]


def retry(config: DomainConfig, job_id: str, force: bool) -> Answer:
    return run_coroutine(_act(config, job_id, _retry))


def cancel(config: DomainConfig, job_id: str, force: bool) -> Answer:
    async def act(redis: ArqRedis, job: Job, queue: str) -> Answer:
        return await _cancel(redis, job, queue, force)

    return run_coroutine(_act(config, job_id, act))


async def _act(config: DomainConfig, job_id: str, action: _Action) -> Answer:
    queue = str(config.option("queue_name"))
    redis = await create_pool(RedisSettings.from_dsn(config.url), default_queue_name=queue)
    try:
        return await action(redis, Job(job_id, redis, _queue_name=queue), queue)
    finally:
        await redis.aclose()


async def _retry(redis: ArqRedis, job: Job, queue: str) -> Answer:
    status = await job.status()
    if status != JobStatus.complete:
        if status == JobStatus.not_found:
            return Answer(NOT_FOUND, f"arq keeps no job or result {job.job_id} (expired?)")
        return Answer(REFUSED, f"arq retries finished jobs only; this one is {status.value}")
    result = await job.result_info()
    if result is None:
        return Answer(NOT_FOUND, f"arq keeps no result of {job.job_id}: its arguments are gone")
    if result.success:
        return Answer(REFUSED, "arq retries failed jobs only; this one succeeded")
    next_try = result.job_try + 1
    key = result_key_prefix + job.job_id
    async with redis.pipeline(transaction=True) as pipe:
        pipe.get(key)
        pipe.pttl(key)
        pipe.delete(key)
        kept, ttl_ms, _ = await pipe.execute()
    try:
        enqueued: Any = await redis.enqueue_job(
            result.function,
            *result.args,
            _job_id=job.job_id,
            _queue_name=result.queue_name or queue,
            _job_try=next_try,
            **result.kwargs,
        )
    except BaseException:
        await _restore(redis, key, kept, ttl_ms)
        raise
    if enqueued is None:
        await _restore(redis, key, kept, ttl_ms)
        return Answer(REFUSED, "arq refused the id: a job with it was enqueued meanwhile")
    return Answer(DONE, f"enqueued {result.function} again as try {next_try}")


async def _restore(redis: ArqRedis, key: str, kept: bytes | None, ttl_ms: int) -> None:
    """Put back a result deleted for an enqueue that did not happen: the job's function and
    arguments live only there (unless a newer result took its place)."""
    if kept is not None:
        await redis.set(key, kept, px=ttl_ms if ttl_ms > 0 else None, nx=True)


async def _cancel(redis: ArqRedis, job: Job, queue: str, force: bool) -> Answer:
    status = await job.status()
    if status in (JobStatus.queued, JobStatus.deferred):
        async with redis.pipeline(transaction=True) as pipe:
            pipe.zrem(queue, job.job_id)
            pipe.delete(job_key_prefix + job.job_id)
            removed, _ = await pipe.execute()
        if removed:
            return Answer(DONE, f"removed from {queue} ({status.value})")
        return Answer(REFUSED, "arq: a worker took the job meanwhile")
    if status == JobStatus.not_found:
        return Answer(NOT_FOUND, f"arq has no job {job.job_id} in {queue}")
    if status != JobStatus.in_progress:
        return Answer(REFUSED, f"arq cancels waiting or running jobs; this one is {status.value}")
    if not force:
        return Answer(REFUSED, "arq: the job is running; force asks the worker to abort it")
    try:
        aborted = await job.abort(timeout=ABORT_WAIT_S)
    except asyncio.TimeoutError:
        aborted = False
    if aborted:
        return Answer(DONE, "aborted by its worker")
    return Answer(REFUSED, "arq: not aborted (the worker needs allow_abort_jobs = True)")
