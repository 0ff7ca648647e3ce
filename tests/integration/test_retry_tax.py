"""The retry tax (migration 0017): failed attempts and the seconds they spent per job type and
step, and each type's p50/p95 time to success, over histories whose every time is known."""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from otel_jobsteps.cli import main
from otel_jobsteps.maintenance import prune
from otel_jobsteps.web import create_app
from tests.helpers import rows

# Two days ago, on a whole second: every time below is BASE + seconds.
BASE = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(days=2)
OLD = BASE - timedelta(days=1)  # before the window the tests ask for

# (job id, attempt, [(step, start s, end s, status)], final status, end s, detail step or "")
# "" as the detail step: the final row has no step (an older writer); None: no detail at all.
History = tuple[str, int, list[tuple[str, int, int, str]], str, int, str | None]
HISTORIES: list[History] = [
    # A: SAVE fails after FETCH; retried 60 s later, completes: 70 s to success.
    ("A", 1, [("FETCH", 0, 2, "COMPLETED"), ("SAVE", 2, 5, "FAILED")], "FAILED", 5, "SAVE"),
    ("A", 2, [("FETCH", 65, 67, "COMPLETED"), ("SAVE", 67, 68, "COMPLETED")], "COMPLETED", 70, ""),
    # B: FETCH fails, then SAVE, then completes: 102 s.
    ("B", 1, [("FETCH", 0, 10, "FAILED")], "FAILED", 10, "FETCH"),
    ("B", 2, [("FETCH", 20, 21, "COMPLETED"), ("SAVE", 21, 25, "FAILED")], "FAILED", 25, "SAVE"),
    ("B", 3, [("FETCH", 100, 101, "COMPLETED"), ("SAVE", 101, 102, "COMPLETED")], "COMPLETED",
     102, ""),
    # C: completes at once: 4 s.
    ("C", 1, [("FETCH", 0, 1, "COMPLETED"), ("SAVE", 1, 3, "COMPLETED")], "COMPLETED", 4, ""),
    # D: fails with no step in its final row: the latest step (SAVE) is the failing one.
    ("D", 1, [("FETCH", 0, 3, "COMPLETED"), ("SAVE", 3, 4, "FAILED")], "FAILED", 4, None),
    # E: completes (never retried: no time to success), runs again later, fails at FETCH and
    # completes on the retry: 110 s, from the start of the run after its first completion.
    ("E", 1, [("FETCH", 0, 5, "COMPLETED")], "COMPLETED", 5, ""),
    ("E", 2, [("FETCH", 1000, 1003, "FAILED")], "FAILED", 1003, "FETCH"),
    ("E", 3, [("FETCH", 1100, 1110, "COMPLETED")], "COMPLETED", 1110, ""),
]  # fmt: skip
# Another type: one failed attempt, nothing completed (no time to success).
DIGEST: History = ("G", 1, [("SEND", 0, 7, "FAILED")], "FAILED", 7, "SEND")
# Before the window: SAVE failed after 100 s.
OLD_FAILURE: History = ("F", 1, [("SAVE", 0, 100, "FAILED")], "FAILED", 100, "SAVE")


def _at(base: datetime, seconds: int) -> datetime:
    return base + timedelta(seconds=seconds)


def record(
    conn: psycopg.Connection[Any],
    history: History,
    job_type: str = "thumbnail",
    base: datetime = BASE,
) -> None:
    """One attempt's STEP rows and final row, as the doors write them."""
    job_id, attempt, steps, status, end, failing = history
    for key, start, stop, step_status in steps:
        conn.execute(
            "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key,"
            " step_status, created_at, ended_at) VALUES ('render', %s, %s, %s, 'STEP', %s, %s,"
            " %s, %s)",
            (job_id, job_type, attempt, key, step_status, _at(base, start), _at(base, stop)),
        )
    detail = None if failing is None else psycopg.types.json.Jsonb({"step": failing or None})
    conn.execute(
        "INSERT INTO job_log (domain, job_id, job_type, attempt, status, detail, created_at)"
        " VALUES ('render', %s, %s, %s, %s, %s, %s)",
        (job_id, job_type, attempt, status, detail, _at(base, end)),
    )


def record_all(conn: psycopg.Connection[Any]) -> None:
    for history in HISTORIES:
        record(conn, history)
    record(conn, DIGEST, job_type="digest")
    record(conn, OLD_FAILURE, base=OLD)
    # Partitioned layout: finished attempts move into their interval's child (nothing is old
    # enough to go); default layout: nothing changes.
    prune(conn, timedelta(days=30))
    if os.environ.get("OTEL_JOBSTEPS_TEST_LAYOUT") == "partitioned":
        assert rows(conn, "SELECT count(*) FROM ONLY job_event") == [(0,)]


def _p(values: list[float], fraction: float) -> float:
    """percentile_cont: linear between the two nearest ranks."""
    values = sorted(values)
    rank = fraction * (len(values) - 1)
    low = int(rank)
    high = min(low + 1, len(values) - 1)
    return values[low] + (rank - low) * (values[high] - values[low])


TO_SUCCESS = [70.0, 102.0, 110.0]  # the retried jobs A, B, E (C completed at once)
P50, P95 = _p(TO_SUCCESS, 0.5), _p(TO_SUCCESS, 0.95)  # 102 and 109.2


def test_sums_per_type_and_step_and_percentiles_of_time_to_success(
    conn: psycopg.Connection[Any],
) -> None:
    record_all(conn)
    found = rows(
        conn,
        "SELECT job_type, step_key, failed_attempts, failed_seconds, to_success_p50_seconds,"
        " to_success_p95_seconds FROM job_retry_tax(%s) ORDER BY 1, 2",
        BASE - timedelta(hours=1),
    )
    assert (102.0, pytest.approx(109.2)) == (P50, P95)
    assert found == [
        ("digest", "SEND", 1, 7.0, None, None),
        # FETCH: B1 and E2 failed there; seconds: A1 2 + B1 10 + B2 1 + D1 3 + E2 3
        ("thumbnail", "FETCH", 2, 19.0, P50, pytest.approx(P95)),
        # SAVE: A1, B2, D1 failed there; seconds: A1 3 + B2 4 + D1 1
        ("thumbnail", "SAVE", 3, 8.0, P50, pytest.approx(P95)),
    ]


def test_the_view_reads_every_row_kept_and_the_window_leaves_older_attempts_out(
    conn: psycopg.Connection[Any],
) -> None:
    record_all(conn)
    query = (
        "SELECT step_key, failed_attempts, failed_seconds FROM {} WHERE job_type = 'thumbnail'"
        " ORDER BY 1"
    )
    everything = rows(conn, query.format("job_retry_tax"))
    assert everything == rows(conn, query.format("job_retry_tax(NULL)"))
    assert everything == [("FETCH", 2, 19.0), ("SAVE", 4, 108.0)]  # F's 100 s in SAVE
    # From 8 s on: failed B1 (FETCH 10 s), B2 (FETCH 1 s, SAVE 4 s) and E2 (FETCH 3 s), retried
    # to success: B (102 s) and E (110 s); A1, D1 and G failed before (A is not counted).
    late = rows(conn, "SELECT * FROM job_retry_tax(%s) ORDER BY 1, 2", _at(BASE, 8))
    p50, p95 = _p([102.0, 110.0], 0.5), _p([102.0, 110.0], 0.95)
    assert late == [
        ("thumbnail", "FETCH", 2, 14.0, p50, pytest.approx(p95)),
        ("thumbnail", "SAVE", 1, 4.0, p50, pytest.approx(p95)),
    ]


def test_steps_retry_tax_prints_the_table(
    dsn: str, conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    record_all(conn)
    # A job type and step key written by hostile job code: shown escaped, never acted on.
    record(conn, ("H", 1, [("\x1b[2J", 0, 1, "FAILED")], "FAILED", 1, "\x1b[2J"), "evil\u202e")
    since = ["--dsn", dsn, "steps", "--since", "2d1h"]  # BASE is 2 days ago, OLD 3 days
    assert main([*since, "--retry-tax"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "JOB TYPE    STEP     FAILED ATTEMPTS  TIME IN FAILED  TO SUCCESS P50  P95",
        "digest      SEND     1                7.00s           -               -",
        "evil\\u202e  \\x1b[2J  1                1.00s           -               -",
        "thumbnail   FETCH    2                19.00s          1m42s           1m49s",
        "thumbnail   SAVE     3                8.00s           1m42s           1m49s",
    ]
    assert main([*since, "--retry-tax", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed[3] == {
        "job_type": "thumbnail",
        "step_key": "SAVE",
        "failed_attempts": 3,
        "failed_seconds": 8.0,
        "to_success_p50_seconds": 102.0,
        "to_success_p95_seconds": pytest.approx(109.2),
    }
    assert main(["--dsn", dsn, "steps", "--since", "1h", "--retry-tax"]) == 0
    assert capsys.readouterr().out == "no failed attempts in the last 1h\n"


def test_steps_prints_durations(
    dsn: str, conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    record(conn, HISTORIES[0])
    record(conn, HISTORIES[1])
    assert main(["--dsn", dsn, "steps", "--since", "3d"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:7] for line in lines] == [
        ["JOB", "TYPE", "STEP", "COUNT", "FAILED", "P50", "P95"],
        ["thumbnail", "FETCH", "2", "0", "2.00s", "2.00s", "2.00s"],
        ["thumbnail", "SAVE", "2", "1", "2.00s", "2.90s", "3.00s"],
    ]


def test_the_steps_page_shows_the_retry_tax(dsn: str, conn: psycopg.Connection[Any]) -> None:
    record_all(conn)
    record(conn, ("H", 1, [("<b>x</b>", 0, 1, "FAILED")], "FAILED", 1, "<b>x</b>"), "<i>t</i>")
    with TestClient(create_app(dsn)) as client:
        page = client.get("/steps?window=all")
        empty = client.get("/steps?window=1h")
    assert page.status_code == 200
    section = page.text[page.text.index('<h2 id="retry-tax">') :]
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", section)
    found = [tuple(cells[i : i + 6]) for i in range(0, len(cells), 6)]
    # by job type (in the database's collation), the costliest step of each first
    assert sorted(found) == [
        ("&lt;i&gt;t&lt;/i&gt;", "&lt;b&gt;x&lt;/b&gt;", "1", "1.00s", "-", "-"),
        ("digest", "SEND", "1", "7.00s", "-", "-"),
        ("thumbnail", "FETCH", "2", "19.00s", "1m42s", "1m49s"),
        ("thumbnail", "SAVE", "4", "1m48s", "1m42s", "1m49s"),  # F's 100 s included
    ]
    assert [row[1] for row in found if row[0] == "thumbnail"] == ["SAVE", "FETCH"]
    assert "No attempt failed within 1h." in empty.text
