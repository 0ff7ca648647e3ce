"""The Celery app the integration tests run in a real worker (RabbitMQ broker, prefork pool).

`apps_celery_plain` defines the app and its ``jobsteps.flaky`` task; this module adds the
adapter, tracing set up in code and the tasks that misbehave.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Any

from celery import Task, signals
from celery.exceptions import SoftTimeLimitExceeded

from otel_jobsteps import step
from otel_jobsteps.integrations.celery import instrument
from tests.queues.apps_celery_plain import app
from tests.queues.apps_common import DOMAIN, die_now, setup_tracing, sleep_past_limit

instrument(app, domain=DOMAIN)


@signals.worker_init.connect
def _tracing(**_: Any) -> None:
    # In the main process, before the pool forks: children inherit a live writer.
    setup_tracing()
    if os.environ.get("JOBSTEPS_TEST_OTEL_CELERY"):
        from opentelemetry.instrumentation.celery import CeleryInstrumentor

        CeleryInstrumentor().instrument()


@app.task(bind=True, name="jobsteps.slow_soft", soft_time_limit=1)
def slow_soft(self: Task, swallow: bool) -> str:
    with step("RENDER"):
        sleep_past_limit(SoftTimeLimitExceeded, swallow)
    return "late"


@app.task(bind=True, name="jobsteps.slow_hard", time_limit=1, acks_late=False)
def slow_hard(self: Task, stuck_in_c: bool) -> str:
    """Past the hard limit billiard sends TERM, then KILL 0.1 s later."""
    with step("RENDER"):
        if stuck_in_c:
            # One C call that never returns to the interpreter: the TERM handler cannot run.
            hashlib.pbkdf2_hmac("sha256", b"password", b"salt", 200_000_000)
        else:
            time.sleep(10)
    return "never"


@app.task(bind=True, name="jobsteps.killed")
def killed(self: Task) -> str:
    """The pool process dies (SIGKILL, like the OOM killer) in RENDER on the first delivery."""
    with step("RENDER"):
        if not self.request.delivery_info.get("redelivered"):
            die_now()
    with step("SAVE"):
        pass
    return "saved"


@app.task(bind=True, name="jobsteps.retry_between_steps")
def retry_between_steps(self: Task) -> str:
    """RENDER completes, then attempt 1 asks for a retry outside any step, in 1 s."""
    with step("RENDER"):
        pass
    if self.request.retries == 0:
        raise self.retry(exc=ValueError("bad input"), countdown=1)
    return "done"
