"""BullMQ jobs for the integration tests; ``python -m tests.queues.apps_bullmq`` runs a
worker (options as JSON in JOBSTEPS_TEST_BULLMQ_OPTS) until SIGTERM. With JOBSTEPS_TEST_PLAIN=1
it sets up neither tracing nor the adapter (``opentelemetry-instrument`` does both)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from typing import Any

from bullmq import Job, Worker

from otel_jobsteps import progress, step
from otel_jobsteps.integrations.bullmq import instrument
from tests.queues.apps_common import DOMAIN, QUEUE, die_now, setup_tracing


async def flaky(job: Job) -> str:
    """RENDER then SAVE; SAVE raises on attempt 1 (the job is added with attempts=2)."""
    async with step("RENDER"):
        progress(pct=100)
    async with step("SAVE"):
        if job.attemptsMade == 0:
            raise OSError("disk full")
    return "saved"


async def blocking(job: Job) -> str:
    """Blocks the event loop past the lock duration: the lock is not renewed and expires."""
    async with step("RENDER"):
        time.sleep(2.5)
    return "late"


async def killed(job: Job) -> str:
    """The worker process dies (SIGKILL) in RENDER on the job's first run."""
    async with step("RENDER"):
        if job.attemptsStarted == 1:
            die_now()
    async with step("SAVE"):
        pass
    return "saved"


JOBS = {"flaky": flaky, "blocking": blocking, "killed": killed}


async def process(job: Job, token: str) -> Any:
    return await JOBS[job.name](job)


async def main() -> None:
    plain = os.environ.get("JOBSTEPS_TEST_PLAIN") == "1"
    if not plain:
        setup_tracing()
    options = {"connection": os.environ["JOBSTEPS_TEST_REDIS_URL"]}
    options.update(json.loads(os.environ.get("JOBSTEPS_TEST_BULLMQ_OPTS", "{}")))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    worker = Worker(QUEUE, process, options)  # type: ignore[arg-type]
    if not plain:
        instrument(worker, domain=DOMAIN)
    print("worker ready", flush=True)
    await stop.wait()
    await worker.close()


if __name__ == "__main__":
    asyncio.run(main())
