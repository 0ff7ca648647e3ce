"""A Celery app with no otel_jobsteps or OpenTelemetry setup: steps inside tasks only.

The zero-code tests run it under ``opentelemetry-instrument``; `apps_celery` adds the adapter
and tracing in code to the same app.
"""

from __future__ import annotations

import os

from celery import Celery, Task
from kombu import Exchange, Queue

from otel_jobsteps import progress, step

QUEUE = os.environ.get("JOBSTEPS_TEST_QUEUE", "otel-jobsteps-test")

app = Celery("jobsteps_test", broker=os.environ.get("JOBSTEPS_TEST_BROKER", "amqp://"))
app.conf.update(
    task_default_queue=QUEUE,
    task_queues=[Queue(QUEUE, Exchange(QUEUE, auto_delete=True), QUEUE, auto_delete=True)],
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(bind=True, name="jobsteps.flaky")
def flaky(self: Task) -> str:
    """RENDER then SAVE; SAVE fails on attempt 1 and the task retries at once."""
    with step("RENDER"):
        progress(pct=100)
    with step("SAVE"):
        if self.request.retries == 0:
            raise self.retry(exc=OSError("disk full"), countdown=0)
    return "saved"
