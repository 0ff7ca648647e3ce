"""Real brokers and real workers for the queue adapter tests.

Each test module gets one migrated database (its workers write there) and starts its workers as
subprocesses in their own process group, each with a watchdog; teardown always kills the group.
A test needing a broker skips with the reason when nothing answers on its port.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.conftest import _create_database, _database_dsn, _drop_database

pytest.register_assert_rewrite("tests.integrations.support")

REPO = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("OTEL_JOBSTEPS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
AMQP_URL = os.environ.get("OTEL_JOBSTEPS_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
WORKER_WATCHDOG_S = 120.0


# CI sets this: there a missing broker is a failure, not a reason to skip.
REQUIRE_BROKERS = os.environ.get("OTEL_JOBSTEPS_REQUIRE_BROKERS") == "1"


def _broker(url: str, needs: str, *, default_port: int, hello: bytes, expect: bytes) -> str:
    """``url`` when its server answers ``hello`` with ``expect``; else skip, saying why."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or default_port
    missing = pytest.fail if REQUIRE_BROKERS else pytest.skip
    try:
        with socket.create_connection((host, port), timeout=1.0) as sock:
            sock.settimeout(1.0)
            sock.sendall(hello)
            answered = sock.recv(16).startswith(expect)
    except OSError as error:
        missing(f"needs {needs}: nothing answers on {host}:{port} ({error})")
    if not answered:
        missing(f"needs {needs}: {host}:{port} answered, but not as expected")
    return url


@pytest.fixture(scope="session")
def redis_url() -> str:
    needs = "Redis (OTEL_JOBSTEPS_TEST_REDIS_URL)"
    return _broker(REDIS_URL, needs, default_port=6379, hello=b"PING\r\n", expect=b"+PONG")


@pytest.fixture(scope="session")
def amqp_url() -> str:
    # The AMQP 0-9-1 protocol header; a broker replies with a Connection.Start method frame.
    needs = "RabbitMQ (OTEL_JOBSTEPS_TEST_AMQP_URL)"
    return _broker(
        AMQP_URL, needs, default_port=5672, hello=b"AMQP\x00\x00\x09\x01", expect=b"\x01"
    )


@pytest.fixture(scope="module")
def module_dsn(server_dsn: str, template_database: str) -> Iterator[str]:
    """A migrated database shared by one module's workers (one worker start per module)."""
    name = f"otel_jobsteps_queue_{uuid.uuid4().hex[:12]}"
    _create_database(server_dsn, name, template=template_database)
    yield _database_dsn(server_dsn, name)
    _drop_database(server_dsn, name)


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


def _descendants(root: int) -> list[int]:
    """Pids of the processes below ``root`` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


class WorkerProcess:
    """A worker subprocess in its own process group, killed by a watchdog if it outlives it."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._watchdog = threading.Timer(WORKER_WATCHDOG_S, self.kill)
        self._watchdog.daemon = True
        self._watchdog.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signum)  # the group this subprocess leads

    def kill(self) -> None:
        """KILL the group and every descendant (RQ's work horse leads a group of its own)."""
        descendants = _descendants(self.process.pid)
        self.signal_group(signal.SIGKILL)
        for pid in descendants:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def stop(self, grace_s: float = 10.0) -> None:
        self._watchdog.cancel()
        if self.process.poll() is None:
            self.signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(grace_s)
        self.kill()  # whatever the leader left behind in its group
        if self.process.poll() is None:
            self.process.wait(5)
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


WorkerFactory = Callable[..., WorkerProcess]


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
