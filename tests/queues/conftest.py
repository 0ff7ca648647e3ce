"""Real brokers and workers for the queue adapter tests: one database and worker start per module.

Workers run in their own process group with a watchdog; a test whose broker is absent skips.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator

import pytest

from tests.helpers import create_database, database_dsn, drop_database
from tests.queues.support import (
    AMQP_URL,
    REDIS_URL,
    REPO,
    WorkerFactory,
    WorkerProcess,
    broker,
)


@pytest.fixture(scope="session")
def redis_url() -> str:
    needs = "Redis (OTEL_JOBSTEPS_TEST_REDIS_URL)"
    return broker(REDIS_URL, needs, default_port=6379, hello=b"PING\r\n", expect=b"+PONG")


@pytest.fixture(scope="session")
def amqp_url() -> str:
    # The AMQP 0-9-1 protocol header: a broker replies with a Connection.Start frame.
    needs = "RabbitMQ (OTEL_JOBSTEPS_TEST_AMQP_URL)"
    return broker(AMQP_URL, needs, default_port=5672, hello=b"AMQP\x00\x00\x09\x01", expect=b"\x01")


@pytest.fixture(scope="module")
def module_dsn(server_dsn: str, template_database: str) -> Iterator[str]:
    """A migrated database shared by one module's workers (one worker start per module)."""
    name = f"otel_jobsteps_queue_{uuid.uuid4().hex[:12]}"
    create_database(server_dsn, name, template=template_database)
    yield database_dsn(server_dsn, name)
    drop_database(server_dsn, name)


@pytest.fixture(scope="module")
def run_id() -> str:
    """Unique per module run: queue names and key prefixes, so stale jobs never interfere."""
    return uuid.uuid4().hex[:10]


@pytest.fixture(scope="module")
def purge_redis(redis_url: str, run_id: str) -> Iterator[None]:
    """At module end, delete the Redis keys whose names carry this run's id."""
    yield
    from redis import Redis

    with Redis.from_url(redis_url) as client:
        keys = list(client.scan_iter(match=f"*{run_id}*", count=1000))
        if keys:
            client.delete(*keys)
        for index in ("rq:queues", "rq:workers"):  # RQ's global sets name our queues/workers
            members = [m for m in client.smembers(index) if run_id.encode() in m]
            if members:
                client.srem(index, *members)


@pytest.fixture(scope="module")
def start_worker(
    module_dsn: str, run_id: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerFactory]:
    """Start ``python -m MODULE ARGS...`` (or any argv) with the module's DB and names."""
    workers: list[WorkerProcess] = []
    log_dir = tmp_path_factory.mktemp("workers")

    def start(*argv: str, env: dict[str, str] | None = None) -> WorkerProcess:
        environment = {
            **os.environ,
            "OTEL_JOBSTEPS_DSN": module_dsn,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")])
            ),
            "PYTHONUNBUFFERED": "1",
            "JOBSTEPS_TEST_QUEUE": f"jobsteps-{run_id}",
            **(env or {}),
        }
        command = [sys.executable, *argv]
        worker = WorkerProcess(command, environment, log_dir / f"worker-{len(workers)}.log")
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()
