"""RQ jobs for the integration tests; ``python -m tests.queues.apps_rq`` runs a worker."""

from __future__ import annotations

import os
import time

from rq import get_current_job
from rq.timeouts import JobTimeoutException

from otel_jobsteps import progress, step
from tests.queues.apps_common import DOMAIN, QUEUE, die_now, setup_tracing, sleep_past_limit


def _first_run() -> bool:
    job = get_current_job()
    assert job is not None
    return job.meta.get("otel_jobsteps.attempt") == 1


def flaky() -> str:
    """RENDER then SAVE; SAVE raises on attempt 1 (the job is enqueued with Retry(max=1))."""
    with step("RENDER"):
        progress(pct=100)
    with step("SAVE"):
        if _first_run():
            raise OSError("disk full")
    return "saved"


def slow(swallow: bool) -> str:
    with step("RENDER"):
        sleep_past_limit(JobTimeoutException, swallow)
    return "late"


def killed() -> str:
    """The work horse dies (SIGKILL, like the OOM killer) in RENDER on attempt 1."""
    with step("RENDER"):
        if _first_run():
            die_now()
    with step("SAVE"):
        pass
    return "saved"


def blocked() -> str:
    with step("RENDER"):
        time.sleep(30)
    return "never"


def main() -> None:
    from redis import Redis

    from otel_jobsteps.integrations.rq import JobStepsWorker, instrument

    setup_tracing()  # in the worker, before it forks a work horse per job
    connection = Redis.from_url(os.environ["JOBSTEPS_TEST_REDIS_URL"])
    worker = instrument(JobStepsWorker([QUEUE], connection=connection), domain=DOMAIN)
    worker.work(logging_level="INFO")


if __name__ == "__main__":
    main()
