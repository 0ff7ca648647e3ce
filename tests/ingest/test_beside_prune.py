"""prune looping beside two collect processes (either layout): every row exactly once, none
lost, no prune failing for a deadlock."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
import uuid

import psycopg

from otel_jobsteps.schema import is_partitioned
from tests.ingest.collector import CollectorFactory, table_rows
from tests.ingest.histories import random_history, tell
from tests.ingest.requests import post, request_of
from tests.ingest.stories import Recording

JOBS = 24
DAY_NS = 86_400 * 10**9


def _prune_until(stop: threading.Event, dsn: str, exits: list[tuple[int, str]]) -> None:
    """Run ``otel-jobsteps prune`` again and again until ``stop``: the partitioned layout moves
    finished attempts into their day's child each time (nothing is old enough to delete)."""
    while not stop.is_set():
        done = subprocess.run(
            [sys.executable, "-m", "otel_jobsteps.cli", "prune", "--dsn", dsn,
             "--older-than", "3650d"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        exits.append((done.returncode, done.stderr))


def test_prune_beside_two_receivers_writes_every_row_once(
    start_collect: CollectorFactory, recording: Recording, dsn: str, second_dsn: str
) -> None:
    prefix = f"p-{uuid.uuid4().hex[:8]}"
    rng = random.Random(20)
    base_ns = time.time_ns() - 3 * DAY_NS  # finished before today: the mover moves them
    spans = recording.spans(
        lambda tracer, _: [
            tell(random_history(rng), tracer, f"{prefix}-{n}", base_ns + n * 10**9)
            for n in range(JOBS)
        ],
        "",
    )
    rng.shuffle(spans)
    # All spans arrive within the settle time: the property test is the one about settling.
    receivers = [start_collect(second_dsn, "--settle-after", "10m") for _ in "ab"]
    stop, exits = threading.Event(), []
    pruner = threading.Thread(target=_prune_until, args=(stop, second_dsn, exits))
    pruner.start()
    try:
        replies = []
        for start in range(0, len(spans), 7):
            url = receivers[start // 7 % 2].traces_url
            replies.append(post(url, request_of(spans[start : start + 7]).SerializeToString()))
            time.sleep(0.05)  # a pace prune interleaves with (no synchronisation relies on it)
    finally:
        stop.set()
        pruner.join(timeout=180)
    assert [r.status_code for r in replies] == [200] * len(replies)
    assert exits
    assert all(code == 0 for code, _ in exits), exits
    assert table_rows(second_dsn, f"{prefix}-%") == table_rows(dsn, f"{prefix}-%")
    with psycopg.connect(second_dsn) as conn:
        moved = conn.execute(
            "SELECT (SELECT count(*) FROM job_event) - (SELECT count(*) FROM ONLY job_event)"
        ).fetchone()
        if is_partitioned(conn):
            assert moved is not None
            assert moved[0] > 0  # prune did move rows while collect derived them
