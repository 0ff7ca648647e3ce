"""An arq job that fails for good on try 1 and succeeds on a later one, for the retry action;
``python -m tests.actions.apps_arq`` runs a worker (aborts allowed: the cancel of a running one)."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from otel_jobsteps import step
from otel_jobsteps.integrations.arq import instrument
from tests.queues import apps_arq
from tests.queues.apps_common import DOMAIN


async def fails_once(ctx: dict[str, Any], label: str, *, size: int) -> str:
    """RENDER then SAVE; SAVE raises on try 1 (a plain error: arq does not retry it)."""
    async with step("RENDER"):
        pass
    async with step("SAVE"):
        if ctx["job_try"] == 1:
            raise OSError("disk full")
    return f"saved {label} {size}"


async def blocked(ctx: dict[str, Any]) -> str:
    async with step("RENDER"):
        await asyncio.sleep(30)
    return "never"


class WorkerSettings:  # arq reads a settings class's own attributes only: no subclass
    functions: ClassVar[list[Any]] = [fails_once, blocked]
    queue_name = apps_arq.WorkerSettings.queue_name
    redis_settings = apps_arq.WorkerSettings.redis_settings
    poll_delay = 0.1
    allow_abort_jobs = True


instrument(WorkerSettings, domain=DOMAIN)

if __name__ == "__main__":
    apps_arq.main(WorkerSettings)
