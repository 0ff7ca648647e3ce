"""The celery dialect on a real prefork worker with only OpenTelemetry's own Celery
instrumentation (``opentelemetry-instrument``, our Celery integration disabled): each task run
is an attempt, ``self.retry(...)`` fails it ``retry``, its ``job.step.key`` spans are its steps."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.distro", reason="needs opentelemetry-distro (instrument extra)")
pytest.importorskip("opentelemetry.instrumentation.celery", reason="needs the celery extra")

from tests.queues.support import (
    WorkerFactory,
    event_types,
    log_rows,
    step_rows,
    wait_for_log,
    wait_until,
)
from tests.queues.test_zero_code import celery_queue, send_celery  # noqa: F401 - fixtures

BIN = Path(sys.executable).parent


def test_only_opentelemetrys_celery_instrumentation_gives_attempts_and_steps(
    start_worker: WorkerFactory,
    amqp_url: str,
    celery_queue: str,  # noqa: F811 - the fixture
    send_celery: Callable[[str], str],  # noqa: F811 - the fixture
    module_dsn: str,
) -> None:
    worker = start_worker(
        str(BIN / "opentelemetry-instrument"), str(BIN / "celery"),
        "-A", "tests.queues.apps_celery_plain", "worker",
        "--pool", "prefork", "--concurrency", "1", "--loglevel", "INFO",
        "--without-heartbeat", "--without-gossip", "--without-mingle",
        "--hostname", f"{celery_queue}@%h",
        env={
            "JOBSTEPS_TEST_QUEUE": celery_queue,
            "JOBSTEPS_TEST_BROKER": amqp_url,
            "OTEL_SERVICE_NAME": "celery-dialect-test",
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "otel_jobsteps_celery",
            "OTEL_JOBSTEPS_DIALECTS": "celery",
        },
    )  # fmt: skip
    wait_until(
        lambda: " ready." in worker.log() or worker.process.poll() is not None,
        timeout_s=60,
        what="the worker to be ready",
    )
    assert worker.process.poll() is None, worker.log()

    job_id = send_celery("jobsteps.flaky")

    domain = celery_queue  # the routing key
    detail = wait_for_log(module_dsn, domain, job_id, 2)
    assert log_rows(module_dsn, domain, job_id) == [(1, "FAILED", "retry"), (2, "COMPLETED", None)]
    assert [(row[0], row[1], row[2]) for row in step_rows(module_dsn, domain, job_id)] == [
        (1, "RENDER", "COMPLETED"),
        (1, "SAVE", "FAILED"),
        (2, "RENDER", "COMPLETED"),
        (2, "SAVE", "COMPLETED"),
    ]
    assert detail.job_type == "jobsteps.flaky"
    assert event_types(detail) == [(1, "RETRY_SCHEDULED")]
