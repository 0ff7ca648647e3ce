"""Retry and cancel through BullMQ's Python client against a real worker on this machine's Redis."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("bullmq", reason="needs the bullmq extra")

from otel_jobsteps.actions import load_actions, run_action
from tests.actions.support import action_rows, actions_file, cli
from tests.queues.support import (
    WorkerFactory,
    WorkerProcess,
    add_job,
    job_state,
    log_rows,
    obliterate,
    run,
    step_rows,
    wait_for_log,
    wait_for_step,
)
from tests.queues.test_bullmq import DOMAIN, start_bullmq_worker


@pytest.fixture(scope="module")
def queue_name(redis_url: str, run_id: str, purge_redis: None) -> Iterator[str]:
    name = f"jobsteps-{run_id}-actions"
    yield name
    run(obliterate(redis_url, name))


@pytest.fixture(scope="module")
def worker(start_worker: WorkerFactory, redis_url: str, queue_name: str) -> WorkerProcess:
    return start_bullmq_worker(start_worker, redis_url, queue_name)


def config(directory: Path, redis_url: str, queue_name: str) -> Path:
    return actions_file(directory, DOMAIN, "bullmq", url=redis_url, queue_name=queue_name)


def test_retry_of_a_failed_job_runs_attempt_2_to_completion(
    worker: WorkerProcess, redis_url: str, queue_name: str, module_dsn: str, tmp_path: Path
) -> None:
    job_id = run(add_job(redis_url, queue_name, "flaky", {}))  # one attempt: fails for good
    wait_for_log(module_dsn, DOMAIN, job_id, 1)
    path = config(tmp_path, redis_url, queue_name)

    assert cli(module_dsn, "retry", DOMAIN, job_id, "--actions", str(path)) == 0

    wait_for_log(module_dsn, DOMAIN, job_id, 2)
    assert log_rows(module_dsn, DOMAIN, job_id) == [(1, "FAILED", "error"), (2, "COMPLETED", None)]
    assert [row[:3] for row in step_rows(module_dsn, DOMAIN, job_id)][2:] == [
        (2, "RENDER", "COMPLETED"),
        (2, "SAVE", "COMPLETED"),
    ]
    [(attempt, detail, _)] = action_rows(module_dsn, DOMAIN, job_id)
    assert (attempt, detail["outcome"], detail["answer"]) == (
        1,
        "done",
        "moved from failed to wait",
    )
    assert run(job_state(redis_url, queue_name, job_id))[0] == "completed"


def test_cancel_removes_a_waiting_job(
    redis_url: str, run_id: str, module_dsn: str, tmp_path: Path
) -> None:
    idle = f"jobsteps-{run_id}-idle-{uuid.uuid4().hex[:6]}"  # no worker: jobs wait
    job_id = run(add_job(redis_url, idle, "flaky", {"delay": 60_000}))
    path = config(tmp_path, redis_url, idle)
    try:
        assert cli(module_dsn, "cancel", DOMAIN, job_id, "--actions", str(path)) == 0
        assert cli(module_dsn, "cancel", DOMAIN, job_id, "--actions", str(path)) == 1
    finally:
        run(obliterate(redis_url, idle))

    first, second = (row[1] for row in action_rows(module_dsn, DOMAIN, job_id))
    assert (first["action"], first["answer"]) == ("cancel", "removed (delayed)")
    assert second["outcome"] == "not_found"  # audited: the job has rows by now
    assert log_rows(module_dsn, DOMAIN, job_id) == [(1, "FAILED", "cancelled")]


def test_an_active_job_is_refused_unless_forced_and_then_bullmq_refuses(
    start_worker: WorkerFactory, redis_url: str, run_id: str, module_dsn: str, tmp_path: Path
) -> None:
    busy = f"jobsteps-{run_id}-busy"
    start_bullmq_worker(start_worker, redis_url, busy, lockDuration=5000)
    job_id = run(add_job(redis_url, busy, "blocking", {}))
    path = config(tmp_path, redis_url, busy)
    try:
        wait_for_step(module_dsn, DOMAIN, job_id, "RENDER")
        actions = load_actions(path)
        unforced = run_action(module_dsn, actions, "cancel", DOMAIN, job_id, actor="test")
        forced = run_action(module_dsn, actions, "cancel", DOMAIN, job_id, actor="t", force=True)
    finally:
        run(obliterate(redis_url, busy))

    assert (unforced.outcome, unforced.answer) == (
        "refused",
        "its latest attempt 1 is running (force to act)",
    )
    assert (forced.outcome, forced.answer) == (
        "refused",
        "BullMQ cannot remove an active job (its worker holds the lock)",
    )
    assert [row[1]["forced"] for row in action_rows(module_dsn, DOMAIN, job_id)] == [False, True]


def test_an_action_from_code_that_runs_an_event_loop(
    redis_url: str, run_id: str, module_dsn: str, tmp_path: Path
) -> None:
    # BullMQ's client is async: called from a thread already running a loop (async code, or
    # Playwright's sync API), the action runs its own loop in a thread instead of failing.
    path = config(tmp_path, redis_url, f"jobsteps-{run_id}-none")

    async def act() -> str:
        return run_action(
            module_dsn, load_actions(path), "cancel", DOMAIN, "nope", actor="t"
        ).outcome

    assert asyncio.run(act()) == "not_found"
