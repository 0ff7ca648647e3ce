"""Celery with no otel_jobsteps or OpenTelemetry code: ``opentelemetry-instrument`` does it.

The task body only marks its steps; the job span around each run, the tracer provider and the
`JobStepsProcessor` come from the environment (`OTEL_TRACES_EXPORTER=otlp` exports the same
spans as well). Needs RabbitMQ on 127.0.0.1:5672 (``CELERY_BROKER_URL``) and a PostgreSQL.
From the repository root:

    pip install '.[celery,instrument]'
    export OTEL_JOBSTEPS_DSN=postgresql://postgres@127.0.0.1:5432/postgres
    otel-jobsteps migrate
    OTEL_JOBSTEPS_DOMAIN=render OTEL_TRACES_EXPORTER=none OTEL_METRICS_EXPORTER=none \\
        OTEL_LOGS_EXPORTER=none \\
        opentelemetry-instrument celery -A examples.zero_code_celery worker   # terminal 1
    python -m examples.zero_code_celery                                       # terminal 2

Rows (domain ``render``, type ``thumbnail``): as ``celery_app.py``'s: attempt 1 RENDER
COMPLETED, SAVE FAILED, a RETRY_SCHEDULED event, job_log FAILED ``retry``; attempt 2 both steps
COMPLETED, job_log COMPLETED. Terminal 2 sends one task and prints its attempts:

    <job id> (1, 'FAILED', 'retry') (2, 'COMPLETED', None)
"""

from __future__ import annotations

import os
import time
import uuid

from celery import Celery, Task

from otel_jobsteps import progress, step
from otel_jobsteps.query import job_detail

app = Celery(
    "thumbnails", broker=os.environ.get("CELERY_BROKER_URL", "amqp://guest:guest@127.0.0.1//")
)


@app.task(bind=True, name="thumbnail", max_retries=3)
def thumbnail(self: Task, image: str) -> str:
    with step("RENDER"):
        progress(pct=100)
    with step("SAVE"):
        if self.request.retries == 0:
            raise self.retry(exc=OSError("disk full"), countdown=1)
    return f"{image}.thumb.png"


if __name__ == "__main__":
    dsn = os.environ["OTEL_JOBSTEPS_DSN"]
    job_id = f"thumb-{uuid.uuid4().hex[:8]}"
    thumbnail.apply_async(("cat.png",), task_id=job_id)
    for _ in range(60):  # until attempt 2, the retry, has its final row
        if (detail := job_detail(dsn, "render", job_id, 2)) and detail.log:
            print(job_id, *[(a.attempt, a.status, a.reason) for a in detail.attempts])
            break
        time.sleep(0.5)
    else:
        raise SystemExit(f"no final row for attempt 2 of {job_id}: is the worker running?")
