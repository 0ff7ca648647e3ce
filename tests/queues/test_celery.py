"""Celery adapter against a real prefork worker on this machine's RabbitMQ."""

from __future__ import annotations

import importlib.util
import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("celery", reason="needs the celery extra")

from celery import Celery
from kombu import Exchange, Queue

from otel_jobsteps.maintenance import SweptStep, sweep
from otel_jobsteps.query import job_detail
from tests.queues.support import (
    WorkerFactory,
    WorkerProcess,
    assert_killed_run_recovered,
    assert_retried_then_completed,
    assert_time_limited,
    log_rows,
    start_celery_worker,
    step_rows,
    wait_for_log,
    wait_for_step,
    wait_until,
)

DOMAIN = "celery-test"
OTEL_CELERY = importlib.util.find_spec("opentelemetry.instrumentation.celery") is not None


@pytest.fixture(scope="module")
def spans_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spans") / "spans.jsonl"


@pytest.fixture(scope="module")
def worker(
    amqp_url: str, start_worker: WorkerFactory, run_id: str, spans_file: Path
) -> WorkerProcess:
    return start_celery_worker(
        start_worker,
        "tests.queues.apps_celery",
        f"jobsteps-{run_id}",
        {
            "JOBSTEPS_TEST_BROKER": amqp_url,
            "JOBSTEPS_TEST_DOMAIN": DOMAIN,
            "JOBSTEPS_TEST_SPANS": str(spans_file),
            "JOBSTEPS_TEST_OTEL_CELERY": "1" if OTEL_CELERY else "",
        },
    )


@pytest.fixture(scope="module")
def client(amqp_url: str, run_id: str) -> Iterator[Celery]:
    queue = f"jobsteps-{run_id}"
    app = Celery("jobsteps_client", broker=amqp_url)
    app.conf.update(
        task_default_queue=queue,
        task_queues=[Queue(queue, Exchange(queue, auto_delete=True), queue, auto_delete=True)],
    )
    yield app
    app.close()


def send(client: Celery, name: str, *args: Any) -> str:
    job_id = f"{name}-{uuid.uuid4().hex[:8]}"
    client.send_task(name, args=args, task_id=job_id)
    return job_id


def test_fails_on_attempt_1_retries_and_succeeds_on_attempt_2(
    worker: WorkerProcess, client: Celery, module_dsn: str
) -> None:
    job_id = send(client, "jobsteps.flaky")

    detail = assert_retried_then_completed(
        module_dsn,
        DOMAIN,
        job_id,
        save_error="OSError: disk full",
        job_type="jobsteps.flaky",
    )
    assert [(a.attempt, a.status, a.reason) for a in detail.attempts] == [
        (1, "FAILED", "retry"),
        (2, "COMPLETED", None),
    ]
    assert detail.events[0].message == "OSError: disk full"
    assert detail.events[0].detail == {"next_attempt": 2, "when": "0"}
    assert detail.stalled_count == 0
    # The attempt failed because of the retry's exc, not the Retry that carried it.
    first = job_detail(module_dsn, DOMAIN, job_id, 1)
    assert first is not None
    assert first.log is not None
    assert first.log.detail == {"step": "SAVE", "error": "OSError: disk full"}


def test_retry_outside_a_step_records_its_exc_on_the_attempt(
    worker: WorkerProcess, client: Celery, module_dsn: str
) -> None:
    job_id = send(client, "jobsteps.retry_between_steps")

    wait_for_log(module_dsn, DOMAIN, job_id, 2)
    first = job_detail(module_dsn, DOMAIN, job_id, 1)
    assert first is not None
    assert first.log is not None
    assert (first.log.reason, first.log.detail) == (
        "retry",
        {"step": "RENDER", "error": "ValueError: bad input"},
    )
    assert [(s.key, s.status, s.message) for s in first.steps] == [("RENDER", "COMPLETED", None)]
    assert [(e.type, e.message, e.detail) for e in first.events] == [
        ("RETRY_SCHEDULED", "ValueError: bad input", {"next_attempt": 2, "when": "1"})
    ]


@pytest.mark.skipif(not OTEL_CELERY, reason="needs opentelemetry-instrumentation-celery")
def test_span_layout_under_opentelemetry_instrumentation_celery(
    worker: WorkerProcess, client: Celery, module_dsn: str, spans_file: Path
) -> None:
    job_id = send(client, "jobsteps.flaky")
    wait_for_log(module_dsn, DOMAIN, job_id, 2)

    # Its run/<task> span (attributes set at postrun) is the parent of each job span; its own
    # spans carry no job.* attribute, so they add no rows.
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    jobs = [s for s in spans if s["attributes"].get("job.id") == job_id]
    runs = {s["span_id"]: s for s in spans if s["name"] == "run/jobsteps.flaky"}
    assert [job["name"] for job in jobs] == ["job jobsteps.flaky", "job jobsteps.flaky"]
    assert all(
        runs[job["parent_id"]]["attributes"]["celery.task_name"] == "jobsteps.flaky" for job in jobs
    )
    assert all("job.id" not in run["attributes"] for run in runs.values())
    assert len(step_rows(module_dsn, DOMAIN, job_id)) == 4


@pytest.mark.parametrize("swallow", [False, True], ids=["raises", "returns-late"])
def test_soft_time_limit_fails_the_attempt_with_time_limit(
    worker: WorkerProcess, client: Celery, module_dsn: str, swallow: bool
) -> None:
    job_id = send(client, "jobsteps.slow_soft", swallow)

    assert_time_limited(module_dsn, DOMAIN, job_id)


def sweep_until_logged(dsn: str, job_id: str) -> list[SweptStep]:
    """Sweep until attempt 1 of ``job_id`` has its job_log row, written by its own process or
    by sweep; returns what sweep settled of this job (sweep is database-wide: the module's
    other jobs are not this test's business)."""
    swept: list[SweptStep] = []

    def settled() -> list[tuple[Any, ...]]:
        # Silent for 3 s while heartbeats come every 1 s: only a dead process's step.
        swept.extend(s for s in sweep(dsn, timedelta(seconds=3)) if s.job_id == job_id)
        return log_rows(dsn, DOMAIN, job_id)

    wait_until(settled, timeout_s=30, what=f"job_log of {job_id}, by its process or by sweep")
    return swept


def test_hard_time_limit_terms_the_process_which_records_time_limit_before_dying(
    worker: WorkerProcess, client: Celery, module_dsn: str
) -> None:
    """TERM unwinds the task, which closes its step and writes FAILED time_limit. billiard
    sends KILL 0.1 s after TERM: on a loaded machine that can come before the writer committed,
    and the attempt is then settled by sweep (the README's other hard-limit outcome)."""
    job_id = send(client, "jobsteps.slow_hard", False)

    swept = sweep_until_logged(module_dsn, job_id)

    assert "Hard time limit (1s) exceeded" in worker.log()
    if not swept:
        assert_time_limited(module_dsn, DOMAIN, job_id)
        return
    # KILL first: sweep closed the open step, or wrote the log of a step the process closed.
    assert [(s.step_key, s.writes_job_log) for s in swept] == [("RENDER", True)]
    assert log_rows(module_dsn, DOMAIN, job_id) == [(1, "FAILED", "abandoned")]
    ((attempt, key, status, message),) = step_rows(module_dsn, DOMAIN, job_id)
    assert (attempt, key, status) == (1, "RENDER", "FAILED")
    assert (message == "abandoned") == swept[0].closes_step


def test_hard_time_limit_kill_leaves_the_attempt_to_sweep(
    worker: WorkerProcess, client: Celery, module_dsn: str
) -> None:
    job_id = send(client, "jobsteps.slow_hard", True)
    wait_for_step(module_dsn, DOMAIN, job_id, "RENDER")

    # Stuck in C code, the process cannot run its TERM handler and dies by KILL, writing
    # nothing more: its step stays open until sweep finds it silent.
    swept = sweep_until_logged(module_dsn, job_id)

    assert [(s.step_key, s.closes_step, s.writes_job_log) for s in swept] == [
        ("RENDER", True, True)
    ]
    assert step_rows(module_dsn, DOMAIN, job_id) == [(1, "RENDER", "FAILED", "abandoned")]
    assert log_rows(module_dsn, DOMAIN, job_id) == [(1, "FAILED", "abandoned")]


def test_killed_pool_process_is_redelivered_as_a_stalled_rerun_of_the_same_attempt(
    worker: WorkerProcess, client: Celery, module_dsn: str
) -> None:
    job_id = send(client, "jobsteps.killed")

    # One attempt, two executions: the re-run's first step closed the dead one's step.
    assert_killed_run_recovered(module_dsn, DOMAIN, job_id, rerun_attempt=1)
    # Fork safety: every row above came from pool processes forked from a main process whose
    # writer thread was already running (the BOOT row).
    assert job_detail(module_dsn, DOMAIN, f"boot-{worker.pid}") is not None
