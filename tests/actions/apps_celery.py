"""The Celery app of the retry action's tests: a Redis result backend with result_extended (the
retry reads the task's name, arguments and queue there) and a task that fails for good on its
first run. ``celery -A tests.actions.apps_celery worker`` runs it; the test process loads the
same app through the actions file."""

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery, Task, signals
from kombu import Exchange, Queue

from otel_jobsteps import step
from otel_jobsteps.integrations.celery import instrument
from tests.queues.apps_common import DOMAIN, QUEUE, setup_tracing
from tests.queues.support import AMQP_URL, REDIS_URL

app = Celery(
    "jobsteps_actions",
    broker=os.environ.get("JOBSTEPS_TEST_BROKER", AMQP_URL),
    backend=REDIS_URL,
)
app.conf.update(
    task_default_queue=QUEUE,
    task_queues=[Queue(QUEUE, Exchange(QUEUE, auto_delete=True), QUEUE, auto_delete=True)],
    result_extended=True,
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(bind=True, name="jobsteps.fails_once")
def fails_once(self: Task, label: str, size: int = 0) -> str:
    """RENDER then SAVE; SAVE raises on the first run (no retry asked: a final failure)."""
    with step("RENDER"):
        pass
    with step("SAVE"):
        if self.request.retries == 0:
            raise OSError("disk full")
    return f"saved {label} {size}"


@app.task(bind=True, name="jobsteps.blocked")
def blocked(self: Task) -> str:
    with step("RENDER"):
        time.sleep(30)
    return "never"


instrument(app, domain=DOMAIN)


@signals.worker_init.connect
def _tracing(**_: Any) -> None:
    setup_tracing()  # in the main process, before the pool forks
