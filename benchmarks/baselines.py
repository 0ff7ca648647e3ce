"""What PostgreSQL and psycopg allow without our code: the reference rates of target 2.

Each step is the same three writes the processor's model needs: insert the open STEP row, one
guarded progress update, one guarded close. Parameters are built before the clock starts.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg

from .common import DOMAIN, STEP_KEYS

INSERT_OPEN = """
INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,
                       trace_id, span_id, execution_id, created_at)
VALUES (%s, %s, %s, %s, 'STEP', %s, 'RUNNING', %s, %s, %s, %s)
"""
# Guarded like the writer's statements: they name the partial index's predicate.
UPDATE_PROGRESS = """
UPDATE job_event SET detail = %s::jsonb
WHERE domain = %s AND job_id = %s AND attempt = %s AND type = 'STEP' AND ended_at IS NULL
  AND execution_id = %s AND step_key = %s
"""
CLOSE_STEP = """
UPDATE job_event SET step_status = 'COMPLETED', ended_at = %s, detail = COALESCE(%s::jsonb, detail)
WHERE domain = %s AND job_id = %s AND attempt = %s AND type = 'STEP' AND ended_at IS NULL
  AND execution_id = %s AND step_key = %s
"""
COPY_ROWS = """
COPY job_event (domain, job_id, job_type, attempt, type, step_key, step_status, detail,
                trace_id, span_id, execution_id, created_at, ended_at) FROM STDIN
"""

Step = tuple[tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]]


def step_statements(prefix: str, steps: int) -> list[Step]:
    """Parameters of (insert, progress, close) for ``steps`` steps, three steps per job."""
    start = datetime.now(timezone.utc)
    out: list[Step] = []
    for number in range(steps):
        job_id = f"{prefix}-{number // 3}"
        key = STEP_KEYS[number % 3]
        trace = f"{number // 3:032x}"
        execution = f"{trace}:{number // 3:016x}"
        guard = (DOMAIN, job_id, 1, execution, key)
        created = start + timedelta(microseconds=number)
        out.append(
            (
                (DOMAIN, job_id, "bench", 1, key, trace, f"{number:016x}", execution, created),
                (json.dumps({"done": 1, "total": 3}), *guard),
                (
                    created + timedelta(microseconds=500),
                    json.dumps({"done": 3, "total": 3}),
                    *guard,
                ),
            )
        )
    return out


def round_trips(dsn: str, steps: int, prefix: str = "rtt") -> float:
    """Steps/s with three autocommit round trips (three commits) per step."""
    work = step_statements(prefix, steps)
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        started = time.perf_counter()
        for insert, progress, close in work:
            cur.execute(INSERT_OPEN, insert)
            cur.execute(UPDATE_PROGRESS, progress)
            cur.execute(CLOSE_STEP, close)
        elapsed = time.perf_counter() - started
    return steps / elapsed


def pipelined(dsn: str, steps: int, batch: int, prefix: str = "pipe") -> float:
    """Steps/s with the same statements pipelined, one transaction per ``batch`` steps."""
    work = step_statements(prefix, steps)
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        started = time.perf_counter()
        for first in range(0, steps, batch):
            with conn.transaction(), conn.pipeline():
                for insert, progress, close in work[first : first + batch]:
                    cur.execute(INSERT_OPEN, insert)
                    cur.execute(UPDATE_PROGRESS, progress)
                    cur.execute(CLOSE_STEP, close)
        elapsed = time.perf_counter() - started
    return steps / elapsed


def copy_rows(dsn: str, rows: int, prefix: str = "copy") -> float:
    """Rows/s of a raw COPY of closed STEP rows: the server's ingest ceiling, for reference."""
    start = datetime.now(timezone.utc)
    detail = json.dumps({"done": 3, "total": 3})
    data = [
        (
            DOMAIN,
            f"{prefix}-{n // 3}",
            "bench",
            1,
            "STEP",
            STEP_KEYS[n % 3],
            "COMPLETED",
            detail,
            f"{n // 3:032x}",
            f"{n:016x}",
            f"{n // 3:032x}:{n // 3:016x}",
            start + timedelta(microseconds=n),
            start + timedelta(microseconds=n + 500),
        )
        for n in range(rows)
    ]
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        started = time.perf_counter()
        with conn.transaction(), cur.copy(COPY_ROWS) as copy:
            for row in data:
                copy.write_row(row)
        elapsed = time.perf_counter() - started
    return rows / elapsed
