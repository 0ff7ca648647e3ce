"""Zero code: real workers configured by environment variables only, no setup in the app.

``opentelemetry-instrument`` loads otel_jobsteps' instrumentors and its post-instrument hook
through the entry points of the installed package; the RQ ``-w`` route needs no wrapper at all.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.distro", reason="needs opentelemetry-distro (instrument extra)")
pytest.importorskip("celery", reason="needs the celery extra")
pytest.importorskip("rq", reason="needs the rq extra")

from celery import Celery
from kombu import Exchange, Queue
from redis import Redis
from rq import Queue as RQQueue
from rq import Retry

from tests.helpers import free_port
from tests.queues.support import (
    WorkerFactory,
    WorkerProcess,
    assert_retried_then_completed,
    wait_until,
)

BIN = Path(sys.executable).parent
CELERY_SAVE_ERROR = "OSError: disk full"
RQ_JOBS = "tests.queues.apps_rq"


def _env(domain: str, queue: str, **extra: str) -> dict[str, str]:
    """OTEL_JOBSTEPS_DSN comes from the worker factory; nothing else is configured."""
    return {
        "OTEL_JOBSTEPS_DOMAIN": domain,
        "JOBSTEPS_TEST_QUEUE": queue,
        "OTEL_SERVICE_NAME": "zero-code-test",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        **extra,
    }


ONLY_JOBSTEPS = {"OTEL_TRACES_EXPORTER": "none", "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "celery"}


def _beside_otlp() -> dict[str, str]:
    """opentelemetry-instrumentation-celery and an OTLP exporter aimed at a closed port."""
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",
    }


def _ready(worker: WorkerProcess, marker: str) -> WorkerProcess:
    wait_until(
        lambda: marker in worker.log() or worker.process.poll() is not None,
        timeout_s=60,
        what=f"the worker to log {marker!r}",
    )
    assert worker.process.poll() is None, worker.log()
    return worker


# -- Celery ----------------------------------------------------------------------------------


@pytest.fixture
def celery_queue(run_id: str) -> str:
    return f"jobsteps-{run_id}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def send_celery(amqp_url: str, celery_queue: str) -> Iterator[Callable[[str], str]]:
    client = Celery("jobsteps_client", broker=amqp_url)
    queue = Queue(
        celery_queue, Exchange(celery_queue, auto_delete=True), celery_queue, auto_delete=True
    )
    client.conf.update(task_default_queue=celery_queue, task_queues=[queue])

    def send(name: str) -> str:
        job_id = f"{name}-{uuid.uuid4().hex[:8]}"
        client.send_task(name, task_id=job_id)
        return job_id

    yield send
    client.close()


@pytest.mark.parametrize(
    "otel_env",
    [pytest.param(ONLY_JOBSTEPS, id="alone"), pytest.param(_beside_otlp(), id="beside-otlp")],
)
def test_opentelemetry_instrument_celery_prefork_worker_records_steps(
    start_worker: WorkerFactory,
    amqp_url: str,
    celery_queue: str,
    send_celery: Callable[[str], str],
    module_dsn: str,
    otel_env: dict[str, str],
) -> None:
    worker = start_worker(
        str(BIN / "opentelemetry-instrument"), str(BIN / "celery"),
        "-A", "tests.queues.apps_celery_plain", "worker",
        "--pool", "prefork", "--concurrency", "1", "--loglevel", "INFO",
        "--without-heartbeat", "--without-gossip", "--without-mingle",
        "--hostname", f"{celery_queue}@%h",
        env={**_env("zero-celery", celery_queue), "JOBSTEPS_TEST_BROKER": amqp_url, **otel_env},
    )  # fmt: skip
    _ready(worker, " ready.")

    job_id = send_celery("jobsteps.flaky")

    assert_retried_then_completed(
        module_dsn, "zero-celery", job_id, save_error=CELERY_SAVE_ERROR, job_type="jobsteps.flaky"
    )


# -- RQ --------------------------------------------------------------------------------------


@pytest.fixture
def rq_queue(redis_url: str, run_id: str, purge_redis: None) -> Iterator[RQQueue]:
    with Redis.from_url(redis_url) as connection:
        queue = RQQueue(f"jobsteps-{run_id}-{uuid.uuid4().hex[:6]}", connection=connection)
        yield queue
        queue.empty()


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(
            [str(BIN / "opentelemetry-instrument"), str(BIN / "rq"), "worker"],
            id="opentelemetry-instrument-rq-worker",
        ),
        pytest.param(
            [str(BIN / "rq"), "worker", "-w", "otel_jobsteps.integrations.rq.JobStepsWorker"],
            id="rq-worker-w-JobStepsWorker",
        ),
    ],
)
def test_rq_worker_with_environment_only_records_steps(
    start_worker: WorkerFactory,
    redis_url: str,
    rq_queue: RQQueue,
    module_dsn: str,
    argv: list[str],
) -> None:
    name = rq_queue.name
    worker = start_worker(
        *argv, "--url", redis_url, name, env=_env("zero-rq", name, **ONLY_JOBSTEPS)
    )
    _ready(worker, "Listening on")
    job_id = f"flaky-{name}"
    rq_queue.enqueue(f"{RQ_JOBS}.flaky", job_id=job_id, retry=Retry(max=1))

    assert_retried_then_completed(
        module_dsn, "zero-rq", job_id, save_error="OSError: disk full", job_type=f"{RQ_JOBS}.flaky"
    )


# -- arq -------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Call to '__init__' function with deprecated usage")
@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(
            [str(BIN / "arq"), "tests.queues.apps_arq.WorkerSettings"],
            id="arq-cli-instrumented-settings",
        ),
        pytest.param(
            [
                str(BIN / "opentelemetry-instrument"),
                str(BIN / "arq"),
                "tests.queues.apps_arq.PlainWorkerSettings",
            ],
            id="opentelemetry-instrument-arq",
        ),
    ],
)
def test_arq_worker_with_environment_only_records_steps(
    start_worker: WorkerFactory,
    redis_url: str,
    run_id: str,
    purge_redis: None,
    module_dsn: str,
    argv: list[str],
) -> None:
    pytest.importorskip("arq", reason="needs the arq extra")
    from tests.queues.support import enqueue

    queue = f"jobsteps-{run_id}-{uuid.uuid4().hex[:6]}"
    env = _env("zero-arq", queue, JOBSTEPS_TEST_DOMAIN="zero-arq", **ONLY_JOBSTEPS)
    worker = start_worker(*argv, env={**env, "JOBSTEPS_TEST_REDIS_URL": redis_url})
    _ready(worker, "Starting worker")
    job_id = enqueue(redis_url, queue, "flaky")

    assert_retried_then_completed(
        module_dsn,
        "zero-arq",
        job_id,
        save_error="arq.worker.Retry: <Retry defer 0.00s>",
        job_type="flaky",
    )


# -- BullMQ ----------------------------------------------------------------------------------


def test_opentelemetry_instrument_bullmq_worker_records_steps(
    start_worker: WorkerFactory, redis_url: str, run_id: str, purge_redis: None, module_dsn: str
) -> None:
    pytest.importorskip("bullmq", reason="needs the bullmq extra")
    from tests.queues.support import add_job, obliterate, run

    queue = f"jobsteps-{run_id}-{uuid.uuid4().hex[:6]}"
    env = _env("zero-bullmq", queue, JOBSTEPS_TEST_PLAIN="1", **ONLY_JOBSTEPS)
    worker = start_worker(
        str(BIN / "opentelemetry-instrument"),
        sys.executable,
        "-m",
        "tests.queues.apps_bullmq",
        env={**env, "JOBSTEPS_TEST_REDIS_URL": redis_url},
    )
    _ready(worker, "worker ready")
    try:
        job_id = run(add_job(redis_url, queue, "flaky", {"attempts": 2}))

        assert_retried_then_completed(
            module_dsn, "zero-bullmq", job_id, save_error="OSError: disk full", job_type="flaky"
        )
    finally:
        run(obliterate(redis_url, queue))
