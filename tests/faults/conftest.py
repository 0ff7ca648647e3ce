"""Fixtures for outage tests: a fault proxy in front of the test database, and processors on it.

Every processor here reaches PostgreSQL only through the proxy, with a password in its DSN
(the servers trust the connection, so the password is never used, only checked for leaks).
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JobStepsProcessor
from tests.faults.proxy import FaultProxy, Upstream
from tests.faults.support import PASSWORD, Bridge, BridgeFactory


@pytest.fixture(scope="session", autouse=True)
def _collect_docker_probe_socket(server_dsn: str) -> None:
    """Collect, quietly, the socket the database plugin's failed Docker probe leaves behind.

    Without a Docker engine, ``docker.from_env()`` raises with a Unix socket still open in its
    traceback; whenever the garbage collector later finds it, the ResourceWarning becomes an
    error in whichever test is running. Collecting it once here, before any test of this
    directory opens a socket, keeps that warning out of these tests.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.fixture
def proxy(dsn: str) -> Iterator[FaultProxy]:
    """A fault proxy in front of this test's database server, closed (every socket) after."""
    with FaultProxy(Upstream.from_dsn(dsn)) as fault_proxy:
        yield fault_proxy


@pytest.fixture
def proxy_dsn(proxy: FaultProxy, dsn: str) -> str:
    """The test database through the proxy, with a password that must never be shown."""
    return proxy.dsn_for(dsn, password=PASSWORD)


@pytest.fixture
def bridge(proxy_dsn: str) -> Iterator[BridgeFactory]:
    """Build tracer + processor on the proxied DSN (short timeouts); shut down before the proxy.

    Keyword arguments go to `JobStepsProcessor` and override the defaults below.
    """
    providers: list[TracerProvider] = []

    def build(**options: Any) -> Bridge:
        settings: dict[str, Any] = {"connect_timeout_s": 2, "shutdown_timeout_ms": 500}
        settings.update(options)
        processor = JobStepsProcessor(proxy_dsn, **settings)
        provider = TracerProvider()
        provider.add_span_processor(processor)
        providers.append(provider)
        return Bridge(provider.get_tracer("faults"), processor, provider)

    yield build
    for provider in providers:
        provider.shutdown()
