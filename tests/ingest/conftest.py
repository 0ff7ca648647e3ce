"""Fixtures of the ingest tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.proxy import FaultProxy, Upstream


@pytest.fixture
def proxy(second_dsn: str) -> Iterator[FaultProxy]:
    """Here the proxy stands in front of collect's database, not the processor's."""
    with FaultProxy(Upstream.from_dsn(second_dsn)) as fault_proxy:
        yield fault_proxy
