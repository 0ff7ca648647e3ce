"""arq + otel_jobsteps: each try of a job is an attempt (``ctx["job_try"]``).

The worker sets up a TracerProvider with a JobStepsProcessor; ``instrument(WorkerSettings)``
wraps the functions. Needs Redis on 127.0.0.1:6379 (``REDIS_URL``) and a PostgreSQL; arq pins
``redis<6``, so install it on its own (README, Set up). From the repository root:

    pip install '.[arq]'
    export OTEL_JOBSTEPS_DSN=postgresql://postgres@127.0.0.1:5432/postgres
    python -m examples.arq_app worker         # terminal 1
    python -m examples.arq_app                # terminal 2: enqueue, then show

(Or ``arq examples.arq_app.WorkerSettings`` for terminal 1, with the provider set up as in
``work()``.) Rows (domain ``render``, type ``thumbnail``): attempt 1 has RENDER COMPLETED
(detail ``{"pct": 100}``) and SAVE FAILED ``arq.worker.Retry: <Retry defer 1.00s>``, a
RETRY_SCHEDULED event and a FAILED ``retry`` job_log row; attempt 2 has both steps COMPLETED
and a COMPLETED job_log row. Terminal 2 prints:

    <job id> (1, 'FAILED', 'retry') (2, 'COMPLETED', None)
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from typing import Any, ClassVar

from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import Retry, run_worker
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JobStepsProcessor, migrate, progress, step
from otel_jobsteps.integrations.arq import instrument
from otel_jobsteps.query import job_detail

REDIS = RedisSettings.from_dsn(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))


async def thumbnail(ctx: dict[str, Any], image: str) -> str:
    async with step("RENDER"):
        for pct in (25, 50, 75, 100):
            progress(pct=pct)
            await asyncio.sleep(0.1)
    async with step("SAVE"):
        if ctx["job_try"] == 1:
            raise Retry(defer=1)  # arq retries on Retry (and cancellation) only
    return f"{image}.thumb.png"


class WorkerSettings:
    functions: ClassVar[list[Any]] = [thumbnail]
    redis_settings = REDIS
    job_timeout = 60


instrument(WorkerSettings, domain="render")  # the one line


async def send() -> None:
    dsn = os.environ["OTEL_JOBSTEPS_DSN"]
    migrate(dsn)  # idempotent; job_detail needs the tables
    job_id = f"thumb-{uuid.uuid4().hex[:8]}"
    async with await create_pool(REDIS) as pool:
        await pool.enqueue_job("thumbnail", "cat.png", _job_id=job_id)
    for _ in range(60):  # until attempt 2, the retry, has its final row
        if (detail := job_detail(dsn, "render", job_id, 2)) and detail.log:
            print(job_id, *[(a.attempt, a.status, a.reason) for a in detail.attempts])
            return
        await asyncio.sleep(0.5)


def work() -> None:
    provider = TracerProvider()
    provider.add_span_processor(JobStepsProcessor(auto_migrate=True))
    trace.set_tracer_provider(provider)
    run_worker(WorkerSettings)  # type: ignore[arg-type]


if __name__ == "__main__":
    work() if sys.argv[1:] == ["worker"] else asyncio.run(send())
