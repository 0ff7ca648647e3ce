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

from .._core.vocabulary import (
    EVENT_RETRY_SCHEDULED,
    EVENT_STALLED,
    OUTCOME_RECLAIMED,
    OUTCOME_RETRY,
    OUTCOME_TIME_LIMIT,
)
