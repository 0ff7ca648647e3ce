"""Log lines (LOG rows) on the read side: job_detail's logs, `show --logs`, `tail`, the job page
and its API, prune; and every other reader of job_event unchanged by them. The LOG rows are
INSERTed as the recorder writes them (the row contract of the logs issue)."""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from otel_jobsteps import job_detail, list_jobs, prune
from otel_jobsteps._cli.demo import record_seed_story
from otel_jobsteps.cli import main
from otel_jobsteps.query import ActivityFollower
from otel_jobsteps.web import create_app
from otel_jobsteps.web.data import Reader
from otel_jobsteps.web.layout import build_timeline, drawn_rows
from otel_jobsteps.web.overdue import NO_LIMITS
from otel_jobsteps.web.rendering import job_url
from tests.helpers import TracingFactory, finished_attempt, rows
from tests.web.support import HOSTILE, add_line, tagged_job

AS_OF = datetime.now(timezone.utc) + timedelta(days=1)
TERMINAL_ATTACK = "\x1b]0;pwned\x07\x1b[2J\rforged line\n"
BIG = "x" * 1_000_000
DEEP: dict[str, Any] = {}
_inner = DEEP
for _ in range(60):
    _inner["deeper"] = {}
    _inner = _inner["deeper"]


def story(tracing: TracingFactory, job_id: str = "logged") -> None:
    tracer, processor = tracing()
    record_seed_story(tracer, job_id, domain="render", stalled=True)
    tagged_job(tracer, "tagged", 1, customer="acme")
    assert processor.force_flush(10_000)


def every_line(conn: psycopg.Connection[Any], job_id: str = "logged") -> None:
    """Lines in both attempts: in steps, between steps, before the first row and after the
    last one (where a reader counting them would move the attempt's start or activity)."""
    add_line(conn, job_id, 1, "RENDER", "rendering 40 frames")
    add_line(conn, job_id, 1, "SAVE", "disk almost full", severity="WARN")
    add_line(conn, job_id, 1, None, "before anything", at="created_at - interval '1 hour'")
    add_line(conn, job_id, 2, None, "long after", at="now() + interval '1 hour'")
    add_line(conn, job_id, 2, "RENDER", "again", severity="ERROR", at="created_at")
    add_line(conn, "tagged", 1, "SEND", "sent", domain="shop")


def test_job_detail_keeps_logs_apart(
    tracing: TracingFactory, conn: psycopg.Connection[Any]
) -> None:
    story(tracing)
    every_line(conn)
    add_line(conn, "logged", 2, "SAVE", "3 log lines dropped", severity="WARN", dropped=3)

    detail = job_detail(conn, "render", "logged")
    first = job_detail(conn, "render", "logged", attempt=1)

    assert detail is not None
    assert first is not None
    assert [(line.step_key, line.severity, line.message) for line in detail.logs] == [
        ("RENDER", "ERROR", "again"),
        ("SAVE", "WARN", "3 log lines dropped"),
        (None, "INFO", "long after"),
    ]
    assert [line.dropped for line in detail.logs] == [None, 3, None]
    assert [line.message for line in first.logs] == [
        "before anything",
        "rendering 40 frames",
        "disk almost full",
    ]
    assert all(line.attempt == 1 for line in first.logs)
    assert all(line.trace_id and line.span_id for line in detail.logs)
    assert "logs" in detail.to_dict()
    assert detail.to_dict()["logs"][0]["time"] == detail.logs[0].time.isoformat()


def read_everything(dsn: str, conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """What every reader of job_event but the log readers says, without the times of the reads."""

    def timeless(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            found = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            return {k: timeless(v) for k, v in found.items() if k not in ("as_of", "logs")}
        if isinstance(value, list | tuple):
            return [timeless(v) for v in value]
        return value

    reader = Reader(dsn)
    everything = {
        "detail": job_detail(conn, "render", "logged"),
        "first": job_detail(conn, "render", "logged", attempt=1),
        "jobs": list_jobs(conn, since=timedelta(days=1)),
        "jobs_all": list_jobs(conn),
        "tagged": list_jobs(conn, tag=("customer", "acme")),
        "page": reader.jobs_page(
            domain=None, job_type=None, status=None, since=None, cursor=None, limit=50
        ).jobs,
        "failed": reader.jobs_page(
            domain=None, job_type=None, status="FAILED", since=None, cursor=None, limit=1
        ).jobs,
        "found": reader.find_jobs("log", domain=None, limit=50).jobs,
        "tag_page": reader.tagged_jobs(
            ("customer", "acme"), domain=None, job_type=None, status=None, since=None, limit=5
        ).jobs,
        "counts": reader.status_counts(None),
        "open": reader.open_steps(timedelta(0), 50, NO_LIMITS),
        "gauges": reader.open_step_gauges(timedelta(minutes=5), NO_LIMITS),
        "stats": reader.step_stats(timedelta(days=1)),
        "failures": reader.step_failures("thumbnail", "SAVE", timedelta(days=1), 50),
        "attempt_view": rows(conn, "SELECT * FROM job_attempt ORDER BY domain, job_id, attempt"),
        "durations": rows(conn, "SELECT * FROM job_step_duration ORDER BY 1, 2"),
    }
    for attempt in (1, 2):
        page = reader.job_page("render", "logged", lambda _: (), attempt=attempt, step="RENDER")
        assert page is not None
        # at a fixed time: an open bar grows with the time of the read
        timeline = build_timeline(page.attempts, page.rows, page.logs, AS_OF, None)
        everything[f"rows_{attempt}"] = [
            {k: v for k, v in row.items() if k != "as_of"} for row in page.rows
        ]
        everything[f"drawn_{attempt}"] = (
            sorted(drawn_rows(timeline)),
            [timeless(lane.rows) for lane in timeline.lanes],
            [timeless(lane.marks) for lane in timeline.lanes],
            timeline.start,
        )
    return {name: timeless(value) for name, value in everything.items()}


def test_log_lines_change_no_other_reader(
    tracing: TracingFactory, dsn: str, conn: psycopg.Connection[Any]
) -> None:
    story(tracing)
    with conn.cursor() as cur:  # one step left open: the open-step readers see something
        cur.execute(
            "UPDATE job_event SET ended_at = NULL, step_status = 'RUNNING'"
            " WHERE job_id = 'logged' AND attempt = 2 AND step_key = 'SAVE'"
        )
        cur.execute("DELETE FROM job_log WHERE job_id = 'logged' AND attempt = 2")
    before = read_everything(dsn, conn)

    every_line(conn)
    after = read_everything(dsn, conn)

    for name, value in before.items():
        assert after[name] == value, name
    assert len(job_detail(conn, "render", "logged").logs) == 2  # type: ignore[union-attr]


def test_show_logs_and_tail_escape_what_job_code_wrote(
    tracing: TracingFactory,
    dsn: str,
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    story(tracing)
    follower = ActivityFollower(conn)
    add_line(conn, "logged", 2, "RENDER", TERMINAL_ATTACK, severity="WARN\x1b[31m")
    add_line(conn, "logged", 2, "SAVE\x1b[2J", BIG, attributes=DEEP)
    add_line(conn, "logged", 2, None, HOSTILE, severity="ERROR")

    assert main(["show", "render", "logged", "--dsn", dsn, "--logs"]) == 0
    shown = capsys.readouterr().out
    assert main(["show", "render", "logged", "--dsn", dsn]) == 0
    without = capsys.readouterr().out

    assert "\x1b" not in shown
    assert "\r" not in shown
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\rforged line\\n" in shown
    assert "log lines of attempt 2:" in shown
    assert "log lines" not in without
    big_line = next(line for line in shown.splitlines() if "xxxx" in line)
    assert len(big_line) < 2_200
    assert "(998,000 more characters)" in big_line
    assert "SAVE\\x1b[2J" in big_line
    assert shown.index("forged line") < shown.index("xxxx") < shown.index("<script>")

    changes = follower.poll()
    assert [change.change for change in changes] == ["log", "log", "log"]
    from otel_jobsteps._cli.timeline import Style
    from otel_jobsteps.cli import activity_line

    tailed = [activity_line(change, Style(color=False)) for change in changes]
    assert "\x1b" not in "".join(tailed)
    assert re.search(r"render / logged #2  WARN\\x1b\[31m  RENDER  \\x1b\]0;pwned", tailed[0])
    assert len(tailed[1]) < 2_200
    assert tailed[2].endswith("ERROR  -  " + HOSTILE)


def test_job_page_shows_a_steps_lines_under_it_escaped(
    tracing: TracingFactory, dsn: str, conn: psycopg.Connection[Any]
) -> None:
    story(tracing)
    add_line(conn, "logged", 2, "RENDER", "first line", at="created_at + interval '1 ms'")
    add_line(
        conn, "logged", 2, "RENDER", HOSTILE, severity="ERROR", at="created_at + interval '2 ms'"
    )
    add_line(conn, "logged", 2, "SAVE", "a SAVE line")
    add_line(conn, "logged", 2, None, "between steps", severity="DEBUG")
    add_line(conn, "logged", 2, "RENDER", BIG, severity="WARN", at="created_at + interval '3 ms'")

    with TestClient(create_app(dsn)) as client:
        page = client.get(job_url("render", "logged", 2, "RENDER")).text
        plain = client.get(job_url("render", "logged")).text
        api = client.get("/api" + job_url("render", "logged")).json()

    panel = page[page.index('<aside class="panel"') :]
    assert '<details class="log-lines"><summary>Log lines of RENDER (3)</summary>' in panel
    lines = re.findall(r'<li class="log-line" data-severity="(\w+)">.*?</li>', panel, re.S)
    assert lines == ["info", "error", "warn"]  # oldest first, newest last
    assert panel.index("first line") < panel.index("&lt;script&gt;") < panel.index("xxxx")
    assert "<script>window" not in page
    assert "a SAVE line" not in page  # another step's lines are in its own panel
    assert "(998,000 more characters)" in panel
    assert len(page) < 100_000
    assert "Log lines between steps (1)" in page
    assert page.index("between steps") < page.index('<aside class="panel"')
    assert "Log lines between steps (1)" in plain
    assert (
        [line["message"][:10] for line in api["logs"]]
        == [
            "first line",
            "a SAVE lin",  # at the same time as the first: by id
            "between st",
            HOSTILE[:10],
            "x" * 10,
        ]
    )
    assert api["events"] == [e for e in api["events"] if e["type"] != "LOG"]


def test_prune_removes_the_lines_with_their_attempts(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    finished_attempt(conn, "old", 1, age="40 days")
    finished_attempt(conn, "recent", 1, age="1 day")
    for job_id in ("old", "recent"):
        add_line(conn, job_id, 1, "SAVE", "a line")
        add_line(conn, job_id, 1, None, "between")

    result = prune(dsn, timedelta(days=30))

    assert result.job_logs == 1
    assert rows(conn, "SELECT job_id, count(*) FROM job_event WHERE type = 'LOG' GROUP BY 1") == [
        ("recent", 2)
    ]
    assert job_detail(conn, "render", "old") is None
