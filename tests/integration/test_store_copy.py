"""Rows the store COPYs (no open step among them) read back exactly as the same rows inserted by
insert_events: details, NULLs, marks, and times past float8's exact microseconds (about 2255),
which the INSERT's arithmetic rounds."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from otel_jobsteps._core.batch import Batch, EventRow, Segment
from otel_jobsteps._core.times import LATEST_NS
from otel_jobsteps._pg.store import StepStore, copyable, statement_params
from otel_jobsteps.sql import qualified_queries
from tests.helpers import rows

FAR_US = 2**57 + 12_345  # in the year 6537; float8 holds multiples of 32 there
COLUMNS = (
    "domain, job_id, job_type, attempt, type, step_key, step_status, detail, message, trace_id,"
    " span_id, execution_id, created_at, ended_at, derived"
)


def _rows(job: str) -> list[EventRow]:
    latest_us = LATEST_NS // 1000
    return [
        EventRow("d", job, "t", 1, "STEP", "A", "COMPLETED", {"n": 1.5, "s": "é"}, None,
                 "0" * 32, "1" * 16, "x", 1_700_000_000_000_001, 1_700_000_000_000_002),
        EventRow("d", job, None, 2, "STEP", "B", "FAILED", None, "boom", None, None, "x",
                 FAR_US, FAR_US + 1),
        EventRow("d", job, "t", 2, "LOG", None, None, {"big": "y" * 5000}, "line", None, None,
                 None, latest_us - 1, None),
        EventRow("d", job, "t", 3, "STALLED", None, None, {}, None, None, None, None,
                 latest_us, None),
    ]  # fmt: skip


@pytest.mark.parametrize("derived", [False, True])
def test_copied_rows_read_as_inserted_rows(
    dsn: str, conn: psycopg.Connection[Any], derived: bool
) -> None:
    copied, inserted = _rows("copied"), _rows("inserted")
    assert copyable(copied)
    store = StepStore(dsn, derived=derived, max_detail_bytes=1000)
    store.write(Batch([Segment(0, rows=copied)]))
    store.close()
    params = statement_params(inserted, 1000, derived=True if derived else None)
    conn.execute(qualified_queries("queries.sql", "public")["insert_events"], params)
    read = f"SELECT {COLUMNS} FROM job_event WHERE job_id = %s ORDER BY id"
    assert [r[2:] for r in rows(conn, read, "copied")] == [
        r[2:] for r in rows(conn, read, "inserted")
    ]
    assert len(rows(conn, read, "copied")) == 4
