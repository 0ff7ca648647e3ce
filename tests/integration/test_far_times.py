"""Times outside what readers can hold: the processor clamps them at write (one rule, in the
shared translation), and every reader survives such rows already in the tables."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from opentelemetry.trace import Tracer, set_span_in_context
from starlette.testclient import TestClient

from otel_jobsteps import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_ID,
    JOB_STEP_KEY,
    JOB_TYPE,
    job_attempt,
    job_detail,
    step,
)
from otel_jobsteps._core.times import EARLIEST, LATEST
from otel_jobsteps._pg.times import read_any_time
from otel_jobsteps.web import create_app
from otel_jobsteps.web.rendering import job_url
from tests.helpers import TracingFactory, record_two_attempts, rows
from tests.reads import assert_every_read_answers, cli, tail_while

FAR_FUTURE_NS = 10**21  # a units mistake: year 33658
PRE_1970_NS = -(10**18)  # 1938
NOW_NS = 1_767_225_600 * 10**9  # 2026-01-01


def _job(tracer: Tracer, job_id: str, *, job_start: int, step_start: int, step_end: int) -> None:
    """A job span with a SAVE step span, both with explicit times."""
    job = tracer.start_span(
        "job",
        start_time=job_start,
        attributes={JOB_DOMAIN: "far", JOB_ID: job_id, JOB_TYPE: "t", JOB_ATTEMPT: 1},
    )
    save = tracer.start_span(
        "save",
        context=set_span_in_context(job),
        start_time=step_start,
        attributes={JOB_STEP_KEY: "SAVE"},
    )
    save.end(end_time=step_end)
    job.end(end_time=max(job_start, step_end))


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_the_processor_clamps_far_times_and_every_read_answers(
    tracing: TracingFactory, dsn: str, writer: str
) -> None:
    tracer, processor = tracing(writer=writer)
    _job(tracer, "future-step", job_start=NOW_NS, step_start=FAR_FUTURE_NS, step_end=NOW_NS)
    _job(tracer, "future-job", job_start=FAR_FUTURE_NS, step_start=NOW_NS, step_end=NOW_NS)
    _job(tracer, "past-step", job_start=NOW_NS, step_start=PRE_1970_NS, step_end=PRE_1970_NS)
    _job(tracer, "past-end", job_start=NOW_NS, step_start=NOW_NS, step_end=PRE_1970_NS)
    assert processor.force_flush(10_000)

    now = datetime.fromtimestamp(NOW_NS / 1e9, timezone.utc)
    with psycopg.connect(dsn) as conn:
        steps = rows(conn, "SELECT job_id, created_at, ended_at FROM job_event ORDER BY job_id, id")
        logs = rows(conn, "SELECT job_id, created_at FROM job_log ORDER BY job_id")
    assert steps == [
        ("future-job", now, now),
        ("future-step", LATEST, LATEST),  # a step never ends before it starts
        ("past-end", now, now),
        ("past-step", EARLIEST, EARLIEST),
    ]
    # A final row is never dated before its attempt's start or its last step close.
    assert logs == [
        ("future-job", LATEST), ("future-step", LATEST), ("past-end", now), ("past-step", now),
    ]  # fmt: skip
    assert processor.stats()["impossible_time"] >= 4
    assert_every_read_answers(
        dsn, [("far", job_id) for job_id in ("future-job", "future-step", "past-end", "past-step")]
    )


# Rows as an older version could have written them (its times were 'epoch' + any bigint of
# microseconds): years after 9999 and BC, which Python cannot hold, and 1900, which it can.
_INSERT_STEP = (
    "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,"
    " message, created_at, ended_at, heartbeat_at)"
    " VALUES ('old', %(job_id)s, 't', 1, 'STEP', %(key)s, %(status)s, 'boom', %(at)s::timestamptz,"
    "  %(ended)s::timestamptz, %(at)s::timestamptz)"
)
_INSERT_LOG = (
    "INSERT INTO job_log (domain, job_id, job_type, attempt, status, reason, detail, created_at)"
    " VALUES ('old', %(job_id)s, 't', 1, 'FAILED', 'error', '{\"step\": \"SAVE\"}',"
    "  %(at)s::timestamptz)"
)
_OLD_TIMES = {
    "year-33658": "33658-09-27 01:46:40+00",
    "year-1900": "1900-01-01 00:00:00+00",
    "bc": "0044-03-15 12:00:00+00 BC",
}


def _insert_old_rows(conn: psycopg.Connection[Any]) -> None:
    for job_id, at in _OLD_TIMES.items():
        for key, status, ended in (("SAVE", "FAILED", at), ("NEXT", "RUNNING", None)):
            conn.execute(_INSERT_STEP, {"job_id": job_id, "key": key, "status": status,
                                        "at": at, "ended": ended})  # fmt: skip
        conn.execute(_INSERT_LOG, {"job_id": job_id, "at": at})


def test_every_read_survives_rows_already_holding_far_times(
    tracing: TracingFactory, dsn: str
) -> None:
    record_two_attempts(tracing)  # ordinary rows beside them
    with psycopg.connect(dsn, autocommit=True) as conn:
        _insert_old_rows(conn)

    jobs = [("old", job_id) for job_id in _OLD_TIMES] + [("render", "42")]
    assert_every_read_answers(dsn, jobs)
    detail = job_detail(dsn, "old", "year-33658")
    assert detail is not None
    assert detail.steps[0].started_at == LATEST  # the nearest time a reader can hold
    bc = job_detail(dsn, "old", "bc")
    assert bc is not None
    assert bc.steps[0].started_at == EARLIEST
    with psycopg.connect(dsn, autocommit=True) as own:  # the caller's connection, as it is
        passed = job_detail(own, "old", "year-33658")
        assert passed is not None
        assert passed.steps[0].started_at == LATEST
        with pytest.raises(psycopg.DataError):  # their own reads keep psycopg's loaders
            own.execute("SELECT created_at FROM job_event WHERE job_id = 'year-33658'").fetchall()


def test_tail_survives_far_times_written_while_it_follows(dsn: str) -> None:
    def write() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            _insert_old_rows(conn)

    lines = tail_while(dsn, write, len(_OLD_TIMES) * 3)  # started, FAILED; NEXT started
    assert sum("SAVE FAILED" in line for line in lines) == len(_OLD_TIMES)


# Steps stored with times no door writes, by hand: (start, end) and the seconds every reader
# gives, from the bounds a reader holds (EARLIEST..LATEST), never negative.
_BOUNDS_S = (LATEST - EARLIEST).total_seconds()
_FAR_STEPS = {
    "infinite": ("-infinity", "infinity", _BOUNDS_S),
    "290k-years": ("4713-01-01 00:00:00+00 BC", "294276-12-31 00:00:00+00", _BOUNDS_S),
    "reversed": ("infinity", "-infinity", 0.0),
    "across-1970": ("1969-12-31 23:00:00+00", "1970-01-01 01:00:00+00", 3600.0),
}


def test_durations_read_from_the_clamped_bounds(tracing: TracingFactory, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for job_id, (start, end, _) in _FAR_STEPS.items():
            conn.execute(
                "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key,"
                " step_status, created_at, ended_at) VALUES ('far', %s, %s, 1, 'STEP', 'SAVE',"
                " 'COMPLETED', %s::timestamptz, %s::timestamptz)",
                (job_id, job_id, start, end),
            )
        stats = rows(conn, "SELECT job_type, max_seconds FROM job_step_duration ORDER BY 1")
    expected = {job_id: seconds for job_id, (_, _, seconds) in _FAR_STEPS.items()}
    assert dict(stats) == expected
    jobs = [("far", job_id) for job_id in _FAR_STEPS]
    assert_every_read_answers(dsn, jobs)
    with TestClient(create_app(dsn)) as client:
        steps = client.get("/api/steps?window=all").json()
        pages = {job_id: client.get(f"/api{job_url('far', job_id)}").json() for job_id in expected}
    windowed = {job_id: s for job_id, s in expected.items() if job_id != "reversed"}
    assert {row["job_type"]: row["max_seconds"] for row in steps} == windowed  # ended -infinity
    for job_id, seconds in expected.items():
        detail = job_detail(dsn, "far", job_id)
        assert detail is not None
        assert detail.steps[0].duration == timedelta(seconds=seconds)
        assert pages[job_id]["steps"][0]["duration"] == seconds
        shown = json.loads(cli(dsn, "show", "far", job_id, "--json").stdout)
        assert shown["steps"][0]["duration"] == seconds


def test_an_open_step_at_minus_infinity_is_still_abandoned(
    tracing: TracingFactory, dsn: str
) -> None:
    """Attempt 2's start closes attempt 1's open step; its duration must not fail the batch."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key,"
            " step_status, created_at, execution_id) VALUES ('far', 'open', 't', 1, 'STEP', 'A',"
            " 'RUNNING', '-infinity', 'x')"
        )
    tracer, processor = tracing()
    with job_attempt("far", "open", "t", attempts_made=1, tracer=tracer), step("B", tracer=tracer):
        pass
    assert processor.force_flush(10_000)
    assert processor.stats().get("write_failed", 0) == 0
    with psycopg.connect(dsn) as conn:
        assert rows(conn, "SELECT attempt, step_status FROM job_event ORDER BY id") == [
            (1, "FAILED"), (2, "COMPLETED"),
        ]  # fmt: skip
        assert rows(conn, "SELECT attempt, status, reason FROM job_log ORDER BY attempt") == [
            (1, "FAILED", "abandoned"), (2, "COMPLETED", None),
        ]  # fmt: skip


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_the_loaders_read_far_times_as_the_nearest_bound(dsn: str, binary: bool) -> None:
    """Both result formats (no read asks for binary yet; one that does must not fail)."""
    times = {
        "infinity": LATEST, "294276-12-31 00:00:00+00": LATEST, "10000-01-01 00:00:00+00": LATEST,
        "-infinity": EARLIEST, "4713-01-01 00:00:00+00 BC": EARLIEST,
        "0001-01-01 00:00:00+00 BC": EARLIEST,
        "1900-01-01 00:00:00+00": datetime(1900, 1, 1, tzinfo=timezone.utc),  # Python holds it
    }  # fmt: skip
    with psycopg.connect(dsn) as conn:
        read_any_time(conn)
        with conn.cursor(binary=binary) as cur:
            for text, expected in times.items():
                cur.execute("SELECT %s::timestamptz", (text,))
                assert cur.pgresult is not None
                assert cur.pgresult.fformat(0) == int(binary)
                assert cur.fetchone() == (expected,), text
