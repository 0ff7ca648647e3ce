"""BullMQ (Python package) + otel_jobsteps: attempt = attemptsMade + 1, one run = one lock token.

The worker sets up a TracerProvider with a JobStepsProcessor and wraps its ``Worker`` with
``instrument()``. Needs Redis on 127.0.0.1:6379 (``REDIS_URL``) and a PostgreSQL. From the
repository root:

    pip install '.[bullmq]'
    export OTEL_JOBSTEPS_DSN=postgresql://postgres@127.0.0.1:5432/postgres
    python -m examples.bullmq_app worker      # terminal 1 (Ctrl+C stops it)
    python -m examples.bullmq_app             # terminal 2: add a job, then show

Rows (domain ``render``, type ``thumbnail``): attempt 1 has RENDER COMPLETED (detail
``{"pct": 100}``) and SAVE FAILED ``OSError: disk full``, a RETRY_SCHEDULED event and a FAILED
``retry`` job_log row; attempt 2 has both steps COMPLETED and a COMPLETED job_log row.
Terminal 2 prints:

    <job id> (1, 'FAILED', 'retry') (2, 'COMPLETED', None)
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from typing import Any

from bullmq import Job, Queue, Worker
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JobStepsProcessor, migrate, progress, step
from otel_jobsteps.integrations.bullmq import instrument
from otel_jobsteps.query import job_detail

CONNECTION = {"connection": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")}


async def thumbnail(job: Job, token: str) -> Any:
    async with step("RENDER"):
        for pct in (25, 50, 75, 100):
            progress(pct=pct)
            await asyncio.sleep(0.1)
    async with step("SAVE"):
        if job.attemptsMade == 0:
            raise OSError("disk full")
    return f"{job.data['image']}.thumb.png"


async def work() -> None:
    provider = TracerProvider()
    provider.add_span_processor(JobStepsProcessor(auto_migrate=True))
    trace.set_tracer_provider(provider)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
    worker = instrument(Worker("render", thumbnail, CONNECTION), domain="render")  # the one line
    await stop.wait()
    await worker.close()
    provider.shutdown()


async def send() -> None:
    dsn = os.environ["OTEL_JOBSTEPS_DSN"]
    migrate(dsn)  # idempotent; job_detail needs the tables
    job_id = f"thumb-{uuid.uuid4().hex[:8]}"
    queue = Queue("render", CONNECTION)
    await queue.add("thumbnail", {"image": "cat.png"}, {"jobId": job_id, "attempts": 3})
    await queue.close()
    for _ in range(60):  # until attempt 2, the retry, has its final row
        if (detail := job_detail(dsn, "render", job_id, 2)) and detail.log:
            print(job_id, *[(a.attempt, a.status, a.reason) for a in detail.attempts])
            return
        await asyncio.sleep(0.5)


if __name__ == "__main__":
    asyncio.run(work() if sys.argv[1:] == ["worker"] else send())
