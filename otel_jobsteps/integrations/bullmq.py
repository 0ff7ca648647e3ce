"""BullMQ (the Python ``bullmq`` package): ``instrument(worker, domain="render")``.

Call it right after constructing the ``Worker``: it wraps the processor and listens to ``stalled``.
What maps to what: docs/integrations.md (read from bullmq 3.4's worker, job and Lua scripts).
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bullmq import Job, Worker
from bullmq.custom_errors import UnrecoverableError
from opentelemetry import trace

from .. import context
from ..attributes import JOB_OUTCOME
from . import EVENT_STALLED, OUTCOME_RECLAIMED
from ._common import AdapterSettings, is_wrapped, logger, mark_wrapped, record_retry_scheduled

__all__ = ["instrument"]

TRACER_NAME = "otel_jobsteps.integrations.bullmq"

Processor = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class _Settings(AdapterSettings):
    check_lock: bool


_workers: weakref.WeakKeyDictionary[Worker, _Settings] = weakref.WeakKeyDictionary()


def instrument(
    worker: Worker,
    domain: str,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    check_lock: bool = True,
) -> Worker:
    """Record every run of ``worker``'s processor as a job attempt in ``domain``; returns it.

    ``check_lock`` asks Redis once per run whether the run still owns the job's lock (the
    late-completion check). Calling it again changes the settings (so code's own call wins over
    the zero-code one made at construction), never wraps twice.
    """
    _workers[worker] = _Settings(TRACER_NAME, domain, tracer_provider, check_lock)
    processor = worker.processor
    if processor is None or is_wrapped(processor):
        return worker
    worker.processor = _wrapped_processor(worker, processor)
    pending: set[asyncio.Task[None]] = set()

    def on_stalled(job_id: str, *_: Any) -> None:
        task = asyncio.ensure_future(_record_stalled(worker, _workers[worker], str(job_id)))
        pending.add(task)
        task.add_done_callback(pending.discard)

    worker.on("stalled", on_stalled)
    return worker


def _wrapped_processor(worker: Worker, processor: Processor) -> Processor:
    @functools.wraps(processor)
    async def process(job: Job, token: str, *rest: Any) -> Any:
        settings = _workers[worker]
        tracer = settings.tracer()
        attempts_made = int(job.attemptsMade or 0)
        async with context.job_attempt(
            settings.domain, job.id, job.name, attempts_made, execution=token, tracer=tracer
        ) as span:
            try:
                result = await processor(job, token, *rest)
            except Exception as error:
                if settings.check_lock and not await _owns_lock(worker, job, token):
                    span.set_attribute(JOB_OUTCOME, OUTCOME_RECLAIMED)
                elif _will_retry(job, error):
                    attempts = job.opts.get("attempts")
                    record_retry_scheduled(
                        span, tracer, next_attempt=attempts_made + 2, attempts=attempts
                    )
                raise
            if settings.check_lock and not await _owns_lock(worker, job, token):
                span.set_attribute(JOB_OUTCOME, OUTCOME_RECLAIMED)
            return result

    return mark_wrapped(process)


def _will_retry(job: Job, error: BaseException) -> bool:
    """Job.moveToFailed's test (a custom backoff returning -1 can still refuse)."""
    attempts = job.opts.get("attempts") or 0
    return (
        (job.attemptsMade or 0) + 1 < attempts
        and not job.discarded
        and not isinstance(error, UnrecoverableError)
    )


async def _owns_lock(worker: Worker, job: Job, token: str) -> bool:
    """Whether the run still holds the job's lock (extendLock answers 0 when it does not)."""
    try:
        answer = await worker.backend.extendLock(job.id, token, worker.opts["lockDuration"])
    except Exception as error:  # noqa: BLE001 - an unanswered check assumes the lock is held
        logger.warning("checking the lock of BullMQ job %s failed: %s", job.id, error)
        return True
    return answer not in (0, "0", b"0", None)


async def _record_stalled(worker: Worker, settings: _Settings, job_id: str) -> None:
    try:
        job = await Job.fromId(worker, job_id)  # the worker stands in for its queue here
    except Exception as error:  # noqa: BLE001 - the event is best effort
        logger.warning("reading stalled BullMQ job %s failed: %s", job_id, error)
        job = None
    attempts_made = int(job.attemptsMade or 0) if job is not None else 0
    context.record_job_event(
        settings.domain,
        job_id,
        EVENT_STALLED,
        "the stalled-job check found its lock expired and took it back",
        attempt=attempts_made + 1,
        job_type=None if job is None else job.name,
        tracer=settings.tracer(),
        source="bullmq.stalled",
        stalled_counter=None if job is None else job.stalledCounter,
    )
