"""arq: ``instrument(WorkerSettings, domain="render")`` records every job run as a job attempt.

It swaps in wrapped ``functions`` (same names, timeouts, tries) and marks each run in Redis to
detect stalls. What maps to what: docs/integrations.md (read from arq 0.28's ``Worker.run_job``).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import MutableMapping
from typing import Any

from arq.typing import WorkerCoroutine
from arq.worker import Function, Retry, func
from opentelemetry import trace

from .. import context
from ..attributes import JOB_OUTCOME
from . import EVENT_STALLED, OUTCOME_TIME_LIMIT
from ._common import (
    AdapterSettings,
    is_wrapped,
    logger,
    mark_wrapped,
    record_retry_scheduled,
    require_domain,
    try_number,
)

__all__ = ["RUNNING_KEY_PREFIX", "instrument", "instrument_function"]

TRACER_NAME = "otel_jobsteps.integrations.arq"
RUNNING_KEY_PREFIX = "otel_jobsteps:arq:running:"
_MARK_TTL_S = 88_400  # as long as arq keeps the job's try counter
_DEFAULT_JOB_TIMEOUT_S = 300.0


def instrument(
    settings: Any,
    domain: str,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    detect_stalls: bool = True,
) -> Any:
    """Wrap every function of an arq ``WorkerSettings`` class (or settings dict); returns it.

    ``detect_stalls`` keeps the per-run Redis mark that turns a dead worker's run into a
    STALLED event (two extra Redis commands per job).
    """
    require_domain(domain)
    mapping: MutableMapping[str, Any] | None = settings if isinstance(settings, dict) else None

    def setting(name: str, default: Any) -> Any:
        if mapping is not None:
            return mapping.get(name, default)
        return getattr(settings, name, default)

    timeout = setting("job_timeout", _DEFAULT_JOB_TIMEOUT_S)
    default_timeout = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
    functions = [
        instrument_function(
            entry,
            domain,
            default_timeout_s=default_timeout,
            retry_jobs=bool(setting("retry_jobs", True)),
            tracer_provider=tracer_provider,
            detect_stalls=detect_stalls,
        )
        for entry in setting("functions", ())
    ]
    if mapping is not None:
        mapping["functions"] = functions
    else:
        settings.functions = functions
    return settings


def instrument_function(
    function: Function | WorkerCoroutine | str,
    domain: str,
    *,
    default_timeout_s: float | None = _DEFAULT_JOB_TIMEOUT_S,
    retry_jobs: bool = True,
    tracer_provider: trace.TracerProvider | None = None,
    detect_stalls: bool = True,
) -> Function:
    """One arq function (as ``functions`` lists it) wrapped to record each run; idempotent."""
    adapter = AdapterSettings(TRACER_NAME, domain, tracer_provider)
    original = func(function)
    if is_wrapped(original.coroutine):
        return original
    timeout_s = original.timeout_s if original.timeout_s is not None else default_timeout_s
    limit = float(timeout_s) if timeout_s else None
    name = original.name
    coroutine = original.coroutine

    @functools.wraps(coroutine)
    async def run(ctx: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        job_id = ctx.get("job_id")
        job_try = ctx.get("job_try")
        if not job_id or type(job_try) is not int:
            return await coroutine(ctx, *args, **kwargs)  # not called by an arq worker
        tracer = adapter.tracer()
        redis = ctx.get("redis") if detect_stalls else None
        await _mark_running(redis, domain, job_id, name, job_try, tracer)
        started = time.monotonic()
        try:
            async with context.job_attempt(
                domain, job_id, name, job_try - 1, time_limit=limit, tracer=tracer
            ) as span:
                try:
                    return await coroutine(ctx, *args, **kwargs)
                except Retry as retry:
                    if retry_jobs:
                        delay = (retry.defer_score or 0) / 1000
                        record_retry_scheduled(
                            span, tracer, next_attempt=job_try + 1, defer_s=delay
                        )
                    raise
                except asyncio.CancelledError:
                    # wait_for cancels the job when its timeout passes; nothing else tells.
                    if limit is not None and time.monotonic() - started >= limit * 0.99:
                        span.set_attribute(JOB_OUTCOME, OUTCOME_TIME_LIMIT)
                    raise
        finally:
            await _clear_running(redis, job_id)

    mark_wrapped(run)
    return Function(
        name, run, original.timeout_s, original.keep_result_s, original.keep_result_forever,
        original.max_tries,
    )  # fmt: skip


async def _mark_running(
    redis: Any, domain: str, job_id: str, job_type: str, job_try: int, tracer: trace.Tracer
) -> None:
    """Mark this try as running; a mark of an earlier try means that try's worker died."""
    if redis is None:
        return
    try:
        previous = await redis.set(RUNNING_KEY_PREFIX + job_id, job_try, ex=_MARK_TTL_S, get=True)
    except Exception as error:  # noqa: BLE001 - bookkeeping must not fail the job
        logger.warning("marking arq job %s as running failed: %s", job_id, error)
        return
    stalled_try = try_number(previous)
    if stalled_try is not None and stalled_try < job_try:
        context.record_job_event(
            domain,
            job_id,
            EVENT_STALLED,
            "the try's worker stopped before the try ended",
            attempt=stalled_try,
            job_type=job_type,
            tracer=tracer,
            source="arq.running_mark",
        )


async def _clear_running(redis: Any, job_id: str) -> None:
    if redis is None:
        return
    try:
        await redis.delete(RUNNING_KEY_PREFIX + job_id)
    except Exception as error:  # noqa: BLE001 - bookkeeping must not fail the job
        logger.warning("clearing the running mark of arq job %s failed: %s", job_id, error)
