"""Pytest plugin: a fault proxy in front of the test database, and processors behind it.

Their DSN carries a password the servers never check, so a leak of it can be looked for.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JobStepsProcessor
from tests.faults.proxy import FaultProxy, Upstream
from tests.faults.support import PASSWORD, Bridge, BridgeFactory


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
    """Tracer and processor on the proxied DSN, short timeouts unless overridden; shut down
    before the proxy closes."""
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
