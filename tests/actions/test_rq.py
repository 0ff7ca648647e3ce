"""Retry and cancel through RQ against a real forking worker on this machine's Redis."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("rq", reason="needs the rq extra")

from redis import Redis
from rq import Queue
from rq.job import JobStatus

from otel_jobsteps.actions import ActionResult, load_actions, run_action
from tests.actions.support import action_rows, actions_file, cli
from tests.queues.support import WorkerProcess, log_rows, step_rows, wait_for_log
from tests.queues.test_rq import DOMAIN, enqueue


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Path:
    return actions_file(tmp_path_factory.mktemp("actions"), DOMAIN, "rq", url=redis_url)


def test_retry_from_the_cli_runs_attempt_2_to_completion(
    worker: WorkerProcess, queue: Queue, module_dsn: str, config_path: Path
) -> None:
    job_id = enqueue(queue, "flaky")  # no retries: attempt 1 fails for good
    wait_for_log(module_dsn, DOMAIN, job_id, 1)

    assert cli(module_dsn, "retry", DOMAIN, job_id, "--actions", str(config_path)) == 0

    wait_for_log(module_dsn, DOMAIN, job_id, 2)
    assert log_rows(module_dsn, DOMAIN, job_id) == [(1, "FAILED", "error"), (2, "COMPLETED", None)]
    assert [row[:3] for row in step_rows(module_dsn, DOMAIN, job_id)] == [
        (1, "RENDER", "COMPLETED"),
        (1, "SAVE", "FAILED"),
        (2, "RENDER", "COMPLETED"),
        (2, "SAVE", "COMPLETED"),
    ]
    [(attempt, detail, message)] = action_rows(module_dsn, DOMAIN, job_id)
    assert attempt == 1
    assert (detail["action"], detail["outcome"], detail["next_attempt"]) == ("retry", "done", 2)
    assert detail["actor"].startswith("cli:")
    assert detail["answer"] == f"requeued on {queue.name}"
    assert message == f"retried by {detail['actor']} → attempt 2"


def test_an_idempotency_key_seen_before_answers_the_earlier_action(
    worker: WorkerProcess, queue: Queue, module_dsn: str, config_path: Path
) -> None:
    job_id = enqueue(queue, "flaky")
    wait_for_log(module_dsn, DOMAIN, job_id, 1)
    config = load_actions(config_path)

    def retry() -> ActionResult:
        return run_action(
            module_dsn, config, "retry", DOMAIN, job_id, actor="test", idempotency_key="k1"
        )

    first, second = retry(), retry()  # a double click

    assert second == replace(first, repeated=True)
    wait_for_log(module_dsn, DOMAIN, job_id, 2)
    assert len(action_rows(module_dsn, DOMAIN, job_id)) == 1
    # Without the key the job is finished now: RQ refuses, and the refusal is audited too.
    assert cli(module_dsn, "retry", DOMAIN, job_id, "--actions", str(config_path)) == 1
    assert [row[1]["outcome"] for row in action_rows(module_dsn, DOMAIN, job_id)] == [
        "done",
        "refused",
    ]


def test_cancel_of_a_waiting_job(
    redis: Redis, run_id: str, module_dsn: str, config_path: Path, purge_redis: None
) -> None:
    idle = Queue(f"jobsteps-{run_id}-idle", connection=redis)  # no worker: jobs wait
    job_id = enqueue(idle, "flaky")

    assert cli(module_dsn, "cancel", DOMAIN, job_id, "--actions", str(config_path)) == 0

    assert idle.fetch_job(job_id).get_status() == JobStatus.CANCELED  # type: ignore[union-attr]
    [(attempt, detail, _)] = action_rows(module_dsn, DOMAIN, job_id)
    assert (attempt, detail["action"], detail["outcome"]) == (1, "cancel", "done")
    # Never run, so never recorded: the cancel ends its attempt instead of leaving it "running".
    assert log_rows(module_dsn, DOMAIN, job_id) == [(1, "FAILED", "cancelled")]
    idle.empty()


def test_a_job_the_queue_does_not_know_is_refused_and_writes_nothing(
    module_dsn: str, config_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(module_dsn, "cancel", DOMAIN, "nope", "--actions", str(config_path)) == 1

    assert capsys.readouterr().err.strip() == "cancel rq-test / nope: not_found, RQ has no job nope"
    assert action_rows(module_dsn, DOMAIN, "nope") == []
