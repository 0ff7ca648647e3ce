from __future__ import annotations

from typing import Any

import psycopg

from tests.helpers import TracingFactory, record_two_attempts, rows


def test_two_attempts_land_in_tables(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    record_two_attempts(tracing)
    assert rows(
        conn, "SELECT attempt, step_key, step_status FROM job_event WHERE type = 'STEP' ORDER BY id"
    ) == [
        (1, "RENDER", "COMPLETED"),
        (1, "SAVE", "FAILED"),
        (2, "RENDER", "COMPLETED"),
        (2, "SAVE", "COMPLETED"),
    ]
