from __future__ import annotations

from typing import Any

import psycopg

from otel_jobsteps import job_attempt, progress, step
from tests.helpers import TracingFactory, rows


def test_two_attempts_land_in_tables(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    tracer, processor = tracing()
    for made in (0, 1):
        try:
            with job_attempt("render", "42", "thumbnail", made, tracer=tracer):
                with step("RENDER", tracer=tracer):
                    progress(pct=40)
                with step("SAVE", tracer=tracer):
                    if made == 0:
                        raise OSError("disk full")
        except OSError:
            pass
    assert processor.force_flush(10_000)
    assert rows(conn, "SELECT attempt, step_key, step_status FROM job_event ORDER BY id") == [
        (1, "RENDER", "COMPLETED"),
        (1, "SAVE", "FAILED"),
        (2, "RENDER", "COMPLETED"),
        (2, "SAVE", "COMPLETED"),
    ]
