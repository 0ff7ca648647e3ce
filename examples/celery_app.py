"""Celery + otel_jobsteps: every task run becomes a job attempt with its steps.

The worker sets up a TracerProvider with a JobStepsProcessor and calls ``instrument(app)``;
the task marks its steps with ``step()`` and ``progress()``. Needs RabbitMQ on 127.0.0.1:5672
(``CELERY_BROKER_URL`` to change it) and a PostgreSQL. From the repository root:

    pip install '.[celery]'
    export OTEL_JOBSTEPS_DSN=postgresql://postgres@127.0.0.1:5432/postgres
    celery -A examples.celery_app worker --loglevel INFO          # terminal 1
    python -m examples.celery_app                                 # terminal 2: send, then show

Rows (domain ``render``, type ``thumbnail``): attempt 1 has RENDER COMPLETED (detail
``{"pct": 100}``) and SAVE FAILED (``celery.exceptions.Retry: Retry in 1s: OSError('disk
full')``), a RETRY_SCHEDULED event and a FAILED ``retry`` job_log row; attempt 2 has RENDER and
SAVE COMPLETED and a COMPLETED job_log row. Terminal 2 prints:

    <job id> (1, 'FAILED', 'retry') (2, 'COMPLETED', None)
"""

from __future__ import annotations

import os
import time
import uuid

from celery import Celery, Task
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JobStepsProcessor, migrate, progress, step
from otel_jobsteps.integrations.celery import instrument
from otel_jobsteps.query import job_detail

provider = TracerProvider()
provider.add_span_processor(JobStepsProcessor(auto_migrate=True))
trace.set_tracer_provider(provider)  # before the pool forks: children get their own writer

app = Celery(
    "thumbnails", broker=os.environ.get("CELERY_BROKER_URL", "amqp://guest:guest@127.0.0.1//")
)
app.conf.update(task_acks_late=True, task_reject_on_worker_lost=True)
instrument(app, domain="render")  # the one line


@app.task(bind=True, name="thumbnail", soft_time_limit=30, max_retries=3)
def thumbnail(self: Task, image: str) -> str:
    with step("RENDER"):
        for pct in (25, 50, 75, 100):
            progress(pct=pct)
            time.sleep(0.1)
    with step("SAVE"):
        if self.request.retries == 0:
            raise self.retry(exc=OSError("disk full"), countdown=1)
    return f"{image}.thumb.png"


if __name__ == "__main__":
    dsn = os.environ["OTEL_JOBSTEPS_DSN"]
    migrate(dsn)  # idempotent; job_detail needs the tables
    job_id = f"thumb-{uuid.uuid4().hex[:8]}"
    thumbnail.apply_async(("cat.png",), task_id=job_id)
    for _ in range(60):  # until attempt 2, the retry, has its final row
        if (detail := job_detail(dsn, "render", job_id, 2)) and detail.log:
            print(job_id, *[(a.attempt, a.status, a.reason) for a in detail.attempts])
            break
        time.sleep(0.5)
