"""Pytest plugin: ``otel-jobsteps collect`` processes (stopped after each test), and stories
recorded to send them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.helpers import free_port, wait_until
from tests.ingest.collector import Collector, CollectorFactory
from tests.ingest.stories import Recording


@pytest.fixture
def start_collect(tmp_path: Any) -> Iterator[CollectorFactory]:
    """Start ``otel-jobsteps collect`` on a free port (gRPC on another, unless ``args`` say);
    every one is stopped after the test."""
    started: list[Collector] = []

    def start(
        dsn: str, *args: str, port: int | None = None, env: dict[str, str] | None = None
    ) -> Collector:
        port = port or free_port()
        grpc_port = None
        if "--grpc-listen" not in args:
            grpc_port = free_port()  # never one handed out before: not ``port``
            args = ("--grpc-listen", f"127.0.0.1:{grpc_port}", *args)
        log_path = str(tmp_path / f"collect-{port}-{len(started)}.log")
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "otel_jobsteps.cli", "collect", "--dsn", dsn,
                 "--listen", f"127.0.0.1:{port}", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                start_new_session=True,  # its group: --workers N forks processes that serve too
            )  # fmt: skip
        collector = Collector(process, f"http://127.0.0.1:{port}", log_path, grpc_port)
        started.append(collector)

        def answers() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"collect exited: {collector.log()}")
            try:
                reply = httpx.post(
                    collector.traces_url,
                    content=b"",
                    headers={"content-type": "application/x-protobuf"},
                    timeout=2,
                )
            except httpx.TransportError:
                return False
            return reply.status_code == 200

        wait_until(answers, what="collect to answer", timeout_s=30)
        return collector

    yield start
    for collector in started:
        # The whole group, even if the parent is gone: its workers would go on serving.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(collector.process.pid, signal.SIGKILL)
        collector.process.wait(timeout=10)


@pytest.fixture
def recording(dsn: str) -> Iterator[Recording]:
    """A processor writing the reference rows while exporters keep what to send collect."""
    recorded = Recording(dsn)
    yield recorded
    recorded.close()
