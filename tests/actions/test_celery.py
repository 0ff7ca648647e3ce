"""Retry and cancel through Celery against a real prefork worker on RabbitMQ (results in Redis)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("celery", reason="needs the celery extra")

from celery import Celery

from otel_jobsteps.actions import celery as celery_actions
from otel_jobsteps.actions import load_actions, run_action
from otel_jobsteps.actions.config import DomainConfig
from tests.actions.support import action_rows, actions_file, cli
from tests.queues.support import (
    WorkerFactory,
    WorkerProcess,
    log_rows,
    start_celery_worker,
    step_rows,
    wait_for_log,
    wait_for_step,
    wait_until,
)

DOMAIN = "celery-actions"


@pytest.fixture(scope="module")
def queue(run_id: str) -> str:
    return f"jobsteps-{run_id}"


@pytest.fixture(scope="module")
def app(queue: str, redis_url: str, purge_redis: None) -> Celery:
    """The worker's app, loaded here as the actions file will (the worker's queue name)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JOBSTEPS_TEST_QUEUE", queue)
        from tests.actions.apps_celery import app

    return app


@pytest.fixture(scope="module")
def worker(amqp_url: str, start_worker: WorkerFactory, run_id: str, app: Celery) -> WorkerProcess:
    env = {"JOBSTEPS_TEST_BROKER": amqp_url, "JOBSTEPS_TEST_DOMAIN": DOMAIN}
    return start_celery_worker(start_worker, "tests.actions.apps_celery", f"actions-{run_id}", env)


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory, amqp_url: str) -> Path:
    directory = tmp_path_factory.mktemp("actions")
    return actions_file(
        directory, DOMAIN, "celery", app="tests.actions.apps_celery:app", url=amqp_url
    )


def test_retry_sends_the_task_again_as_attempt_2(
    worker: WorkerProcess, app: Celery, module_dsn: str, config_path: Path
) -> None:
    job_id = app.send_task("jobsteps.fails_once", args=["poster"], kwargs={"size": 3}).id
    wait_for_log(module_dsn, DOMAIN, job_id, 1)
    wait_until(lambda: app.AsyncResult(job_id).state == "FAILURE", what="the failure stored")

    assert cli(module_dsn, "retry", DOMAIN, job_id, "--actions", str(config_path)) == 0

    wait_for_log(module_dsn, DOMAIN, job_id, 2)
    assert log_rows(module_dsn, DOMAIN, job_id) == [(1, "FAILED", "error"), (2, "COMPLETED", None)]
    assert [row[:3] for row in step_rows(module_dsn, DOMAIN, job_id)][2:] == [
        (2, "RENDER", "COMPLETED"),
        (2, "SAVE", "COMPLETED"),
    ]
    assert app.AsyncResult(job_id).get(timeout=10) == "saved poster 3"
    [(_, detail, _)] = action_rows(module_dsn, DOMAIN, job_id)
    assert detail["answer"].startswith("sent jobsteps.fails_once again as run 2")


def test_cancel_revokes_and_forced_terminates_a_running_task(
    worker: WorkerProcess, app: Celery, module_dsn: str, config_path: Path
) -> None:
    job_id = app.send_task("jobsteps.blocked").id
    wait_for_step(module_dsn, DOMAIN, job_id, "RENDER")
    actions = load_actions(config_path)

    unforced = run_action(module_dsn, actions, "cancel", DOMAIN, job_id, actor="test")
    forced = run_action(module_dsn, actions, "cancel", DOMAIN, job_id, actor="t", force=True)

    assert unforced.outcome == "refused"
    assert (forced.outcome, forced.answer) == (
        "done",
        "revoked with terminate: a running task gets SIGTERM",
    )
    wait_until(lambda: app.AsyncResult(job_id).state == "REVOKED", what="the task revoked")


def test_cancel_of_a_waiting_task_revokes_it_before_it_runs(
    worker: WorkerProcess, app: Celery, module_dsn: str, config_path: Path
) -> None:
    job_id = app.send_task("jobsteps.fails_once", args=["x"], countdown=2).id  # waits its eta

    assert cli(module_dsn, "cancel", DOMAIN, job_id, "--actions", str(config_path)) == 0

    wait_until(lambda: app.AsyncResult(job_id).state == "REVOKED", what="the task dropped")
    assert log_rows(module_dsn, DOMAIN, job_id) == [(1, "FAILED", "cancelled")]  # never ran
    assert step_rows(module_dsn, DOMAIN, job_id) == []


def test_each_broker_url_acts_through_an_app_of_its_own(app: Celery) -> None:
    """Two domains on two brokers may act at once: neither changes the app the file names."""
    reference = "tests.actions.apps_celery:app"
    first, second = (
        DomainConfig(
            f"d{n}", "celery", f"amqp://guest:guest@127.0.0.1:5672/v{n}", {"app": reference}
        )
        for n in (1, 2)
    )
    broker = app.conf.broker_url

    one, two = celery_actions._app(first), celery_actions._app(second)

    assert (one.conf.broker_url, two.conf.broker_url) == (first.url, second.url)
    assert celery_actions._app(first) is one  # one app per URL, kept
    assert app.conf.broker_url == broker
