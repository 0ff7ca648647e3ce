"""BullMQ (the Python ``bullmq`` client on the same Redis keys as Node workers): retry moves a
failed job back to wait with its attemptsMade kept (the worker records attempt N + 1); cancel
removes a waiting, delayed or prioritized job. An active job cannot be removed: refused."""

from __future__ import annotations

from typing import Any

from bullmq import Job, Queue

from ._loop import run_coroutine
from .answers import DONE, NOT_FOUND, REFUSED, Answer
from .config import DomainConfig

__all__ = ["cancel", "retry"]

_REMOVABLE = {"waiting", "wait", "delayed", "prioritized", "paused", "waiting-children"}


def retry(config: DomainConfig, job_id: str, force: bool) -> Answer:
    return run_coroutine(_act(config, job_id, _retry))


def cancel(config: DomainConfig, job_id: str, force: bool) -> Answer:
    return run_coroutine(_act(config, job_id, _cancel))


async def _act(config: DomainConfig, job_id: str, action: Any) -> Answer:
    name = config.option("queue_name") or config.domain
    queue = Queue(name, {"connection": config.url, "prefix": config.option("prefix")})
    try:
        job = await Job.fromId(queue, job_id)
        if job is None:
            return Answer(NOT_FOUND, f"BullMQ queue {name} has no job {job_id}")
        answer: Answer = await action(job, await job.getState())
        return answer
    finally:
        await queue.close()


async def _retry(job: Job, state: str) -> Answer:
    if state not in ("failed", "completed"):
        return Answer(REFUSED, f"BullMQ retries failed or completed jobs only; this one is {state}")
    try:
        await job.retry(state)
    except Exception as error:  # noqa: BLE001 - the Lua script's refusal, as it said it
        return Answer(REFUSED, f"BullMQ refused the retry: {error}")
    return Answer(DONE, f"moved from {state} to wait")


async def _cancel(job: Job, state: str) -> Answer:
    if state == "active":
        return Answer(REFUSED, "BullMQ cannot remove an active job (its worker holds the lock)")
    if state not in _REMOVABLE:
        return Answer(REFUSED, f"BullMQ cancels waiting or delayed jobs only; this one is {state}")
    try:
        await job.remove()
    except Exception as error:  # noqa: BLE001 - locked by a worker meanwhile
        return Answer(REFUSED, f"BullMQ refused the removal: {error}")
    return Answer(DONE, f"removed ({state})")
