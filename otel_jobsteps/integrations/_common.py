"""What the queue adapters share: outcome and event names, flushing the tracer provider."""

from __future__ import annotations

import logging

from opentelemetry import trace

__all__ = [
    "EVENT_RETRY_SCHEDULED",
    "EVENT_STALLED",
    "OUTCOME_RECLAIMED",
    "OUTCOME_RETRY",
    "OUTCOME_TIME_LIMIT",
    "flush_provider",
]

logger = logging.getLogger("otel_jobsteps.integrations")

OUTCOME_RETRY = "retry"
"""``job.outcome`` of an attempt that failed and that the queue will run again."""
OUTCOME_TIME_LIMIT = "time_limit"
"""``job.outcome`` of an attempt the queue's time limit interrupted."""
OUTCOME_RECLAIMED = "reclaimed"
"""``job.outcome`` of a run that finished after the queue had taken the job back."""

EVENT_RETRY_SCHEDULED = "RETRY_SCHEDULED"
"""Ordinary event of an attempt after which the queue scheduled another one."""
EVENT_STALLED = "STALLED"
"""Ordinary event of an attempt whose worker the queue reported lost."""


def flush_provider(provider: trace.TracerProvider | None, timeout_ms: int) -> bool:
    """Flush the (given or global) SDK tracer provider; True when it reported success.

    Used where a queue ends a process with ``os._exit`` (RQ's work horse, Celery's pool
    children), which skips the provider's atexit shutdown.
    """
    provider = provider or trace.get_tracer_provider()
    force_flush = getattr(provider, "force_flush", None)
    if force_flush is None:
        return True
    try:
        return bool(force_flush(timeout_ms))
    except Exception as error:  # noqa: BLE001 - flushing must never break the worker
        logger.warning("flushing the tracer provider failed: %s", error)
        return False
