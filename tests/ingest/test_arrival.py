"""Arrival order is not span order: any split, order, duplicates, markers, and two receivers
give the processor's rows."""

from __future__ import annotations

import random
import threading
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.ingest.collector import Collector, CollectorFactory, table_rows
from tests.ingest.requests import post, request_of, start_markers
from tests.ingest.stories import Recording, tell_all


@pytest.fixture
def receivers(start_collect: CollectorFactory, second_dsn: str) -> list[Collector]:
    """Two receivers on one database; the second runs two worker processes itself."""
    return [start_collect(second_dsn), start_collect(second_dsn, "--workers", "2")]


def _send(collector: Collector, requests: list[bytes], failures: list[str]) -> None:
    for body in requests:
        reply = post(collector.traces_url, body)
        if reply.status_code != 200:
            failures.append(f"{reply.status_code}: {reply.content!r}")


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**32 - 1),
    requests=st.integers(1, 12),
    duplicates=st.integers(0, 6),
    with_markers=st.booleans(),
)
def test_any_arrival_gives_the_processors_rows(
    recording: Recording,
    receivers: list[Collector],
    dsn: str,
    second_dsn: str,
    seed: int,
    requests: int,
    duplicates: int,
    with_markers: bool,
) -> None:
    suffix = f"-{uuid.uuid4().hex[:8]}"
    spans = recording.spans(tell_all, suffix)
    pool = spans + (start_markers(spans) if with_markers else [])
    shuffle = random.Random(seed)
    shuffle.shuffle(pool)
    pool += [shuffle.choice(pool) for _ in range(duplicates)]  # delivered twice
    cuts = sorted(shuffle.sample(range(1, len(pool)), min(requests - 1, len(pool) - 1)))
    parts = [pool[a:b] for a, b in zip([0, *cuts], [*cuts, len(pool)], strict=True)]
    # A request may be retried whole, by a client that timed out, at the other receiver.
    parts += [shuffle.choice(parts) for _ in range(duplicates // 3)]
    bodies: list[list[bytes]] = [[], []]
    for part in parts:
        bodies[shuffle.randrange(2)].append(request_of(part).SerializeToString())
    failures: list[str] = []
    threads = [
        threading.Thread(target=_send, args=(receiver, body, failures))
        for receiver, body in zip(receivers, bodies, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert failures == []
    expected = table_rows(dsn, f"%{suffix}%")
    assert len(expected[0]) == 9
    assert table_rows(second_dsn, f"%{suffix}%") == expected
