"""RQ + otel_jobsteps: the work horse records each job run as a job attempt.

The worker is a ``JobStepsWorker`` with a TracerProvider and a JobStepsProcessor; the job
marks its steps with ``step()`` and ``progress()``. Needs Redis on 127.0.0.1:6379 (``REDIS_URL``)
and a PostgreSQL. From the repository root:

    pip install '.[rq]'
    export OTEL_JOBSTEPS_DSN=postgresql://postgres@127.0.0.1:5432/postgres
    python -m examples.rq_app worker          # terminal 1: a JobStepsWorker on queue "render"
    python -m examples.rq_app                 # terminal 2: enqueue, then show

Rows (domain ``render``, type ``examples.rq_app.thumbnail``): attempt 1 has RENDER COMPLETED
(detail ``{"pct": 100}``) and SAVE FAILED ``OSError: disk full``, a RETRY_SCHEDULED event and a
FAILED ``retry`` job_log row; attempt 2 has both steps COMPLETED and a COMPLETED job_log row.
Terminal 2 prints:

    <job id> (1, 'FAILED', 'retry') (2, 'COMPLETED', None)

(With the rq CLI: ``rq worker -w otel_jobsteps.integrations.rq.JobStepsWorker render`` and
OTEL_JOBSTEPS_DSN set, the worker adds the JobStepsProcessor itself; the domain is then
OTEL_JOBSTEPS_DOMAIN, else the queue name. ``opentelemetry-instrument rq worker render`` works
too: see README, Queue integrations.)
"""

from __future__ import annotations

import os
import sys
import time
import uuid

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from redis import Redis
from rq import Queue, Retry, get_current_job

from otel_jobsteps import JobStepsProcessor, migrate, progress, step
from otel_jobsteps.integrations.rq import ATTEMPT_KEY, JobStepsWorker, instrument
from otel_jobsteps.query import job_detail

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def thumbnail(image: str) -> str:
    job = get_current_job()
    with step("RENDER"):
        for pct in (25, 50, 75, 100):
            progress(pct=pct)
            time.sleep(0.1)
    with step("SAVE"):
        if job is not None and job.meta.get(ATTEMPT_KEY) == 1:
            raise OSError("disk full")
    return f"{image}.thumb.png"


def work() -> None:
    provider = TracerProvider()
    provider.add_span_processor(JobStepsProcessor(auto_migrate=True))
    trace.set_tracer_provider(provider)
    worker = JobStepsWorker(["render"], connection=Redis.from_url(REDIS_URL))
    instrument(worker, domain="render")  # the one line (without it: domain = queue name)
    worker.work()


def send() -> None:
    dsn = os.environ["OTEL_JOBSTEPS_DSN"]
    migrate(dsn)  # idempotent; job_detail needs the tables
    job_id = f"thumb-{uuid.uuid4().hex[:8]}"
    queue = Queue("render", connection=Redis.from_url(REDIS_URL))
    queue.enqueue("examples.rq_app.thumbnail", "cat.png", job_id=job_id, retry=Retry(max=2))
    for _ in range(60):  # until attempt 2, the retry, has its final row
        if (detail := job_detail(dsn, "render", job_id, 2)) and detail.log:
            print(job_id, *[(a.attempt, a.status, a.reason) for a in detail.attempts])
            return
        time.sleep(0.5)


if __name__ == "__main__":
    work() if sys.argv[1:] == ["worker"] else send()
