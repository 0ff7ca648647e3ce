"""Queue adapters: one module per queue, each opening the job span for every task run.

``otel_jobsteps.integrations.celery``, ``.rq``, ``.arq`` and ``.bullmq`` import their queue
library; this package imports none of them, so installing otel_jobsteps never needs one.
"""

from __future__ import annotations

__all__ = [
    "EVENT_RETRY_SCHEDULED",
    "EVENT_STALLED",
    "OUTCOME_RECLAIMED",
    "OUTCOME_RETRY",
    "OUTCOME_TIME_LIMIT",
]

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
