"""arq jobs for the integration tests; ``python -m tests.queues.apps_arq`` runs a worker."""

from __future__ import annotations

import asyncio
import os
from typing import Any, ClassVar

from arq.connections import RedisSettings
from arq.worker import Retry, func

from otel_jobsteps import progress, step
from otel_jobsteps.integrations.arq import instrument
from tests.queues.apps_common import DOMAIN, QUEUE, die_now, setup_tracing


async def flaky(ctx: dict[str, Any]) -> str:
    """RENDER then SAVE; SAVE asks arq for a retry on try 1."""
    async with step("RENDER"):
        progress(pct=100)
    async with step("SAVE"):
        if ctx["job_try"] == 1:
            raise Retry(defer=0)
    return "saved"


async def broken(ctx: dict[str, Any]) -> str:
    async with step("RENDER"):
        raise OSError("disk full")


async def slow(ctx: dict[str, Any]) -> str:
    async with step("RENDER"):
        await asyncio.sleep(5)
    return "late"


async def killed(ctx: dict[str, Any]) -> str:
    """The worker process dies (SIGKILL) in RENDER on try 1."""
    async with step("RENDER"):
        if ctx["job_try"] == 1:
            die_now()
    async with step("SAVE"):
        pass
    return "saved"


class WorkerSettings:
    functions: ClassVar[list[Any]] = [flaky, broken, func(slow, timeout=1), killed]
    queue_name = QUEUE
    redis_settings = RedisSettings.from_dsn(
        os.environ.get("JOBSTEPS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    )
    job_timeout = 2  # in-progress keys of a dead worker's jobs expire after 2 + 10 s
    poll_delay = 0.1
    handle_signals = True


class PlainWorkerSettings:
    """No adapter call: what ``opentelemetry-instrument arq ...`` instruments by itself."""

    functions: ClassVar[list[Any]] = [flaky]
    queue_name = QUEUE
    redis_settings = WorkerSettings.redis_settings
    poll_delay = 0.1


instrument(WorkerSettings, domain=DOMAIN)


def main(settings: type = WorkerSettings) -> None:
    from arq.worker import run_worker

    setup_tracing()
    run_worker(settings)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
