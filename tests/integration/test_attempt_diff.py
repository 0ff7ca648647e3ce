"""The attempt diff (issue 40 item 1): two attempts of a job step by step, over histories whose
every time is known: the alignment by key and run, durations, differences, the first divergence,
each attempt's error and tags; `otel-jobsteps show --diff`."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from otel_jobsteps.cli import EXIT_NOT_FOUND, main
from otel_jobsteps.errors import ConfigurationError
from otel_jobsteps.query import attempt_diff

# An hour ago, on a whole second: every time below is BASE + seconds.
BASE = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=1)
SECOND = timedelta(seconds=1)
HOSTILE_KEY = "<b>x</b>\x1b[2J\n"

# (step, start s, end s or None while running, status, message)
Step = tuple[str, int, int | None, str, str | None]
# job id -> attempt -> (steps, final (status, reason, detail, end s) or None, tags)
Attempt = tuple[list[Step], tuple[str, str | None, dict[str, Any], int] | None, dict[str, str]]
HISTORIES: dict[str, dict[int, Attempt]] = {
    # J: SAVE fails in 1; 2 renders twice, cleans up, and saves.
    "J": {
        1: ([("FETCH", 0, 2, "COMPLETED", None), ("RENDER", 2, 5, "COMPLETED", None),
             ("SAVE", 5, 6, "FAILED", "OSError: disk full")],
            ("FAILED", None, {"step": "SAVE", "error": "OSError: disk full"}, 6),
            {"customer": "acme"}),
        2: ([("FETCH", 60, 61, "COMPLETED", None), ("RENDER", 61, 63, "COMPLETED", None),
             ("RENDER", 63, 64, "COMPLETED", None), ("CLEANUP", 64, 65, "COMPLETED", None),
             ("SAVE", 65, 67, "COMPLETED", None)],
            ("COMPLETED", None, {}, 68),
            {"customer": "acme", "region": "eu"}),
    },
    # K: 1 fails at B past its time limit; 2 runs B before A, and C is still running.
    "K": {
        1: ([("A", 0, 1, "COMPLETED", None), ("B", 1, 3, "FAILED", "too slow")],
            ("FAILED", "time_limit", {"step": "B"}, 3), {}),
        2: ([("B", 10, 12, "COMPLETED", None), ("A", 12, 13, "COMPLETED", None),
             ("C", 13, None, "RUNNING", None)], None, {}),
    },
    # S: the same steps and statuses twice.
    "S": {
        1: ([("A", 0, 4, "COMPLETED", None)], ("COMPLETED", None, {}, 4), {}),
        2: ([("A", 10, 11, "COMPLETED", None)], ("COMPLETED", None, {}, 11), {}),
    },
    # H: job strings a terminal or a page must not act on.
    "H": {
        1: ([("A", 0, 1, "COMPLETED", None)], ("COMPLETED", None, {}, 1), {}),
        2: ([("A", 5, 6, "COMPLETED", None), (HOSTILE_KEY, 6, 7, "FAILED", "\x1b]0;owned\x07")],
            ("FAILED", None, {"error": "<script>alert(1)</script>"}, 7),
            {"who": "<img src=x onerror=alert(1)>\x1b[31m"}),
    },
}  # fmt: skip


def _at(seconds: int | None) -> datetime | None:
    return None if seconds is None else BASE + timedelta(seconds=seconds)


def record_histories(conn: psycopg.Connection[Any]) -> None:
    """Every attempt of `HISTORIES` as the doors write it: STEP rows, TAG rows, final rows."""
    for job_id, attempts in HISTORIES.items():
        for attempt, (steps, final, tags) in attempts.items():
            first = steps[0][1]
            for name, value in tags.items():
                conn.execute(
                    "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key,"
                    " message, created_at) VALUES ('render', %s, 'thumbnail', %s, 'TAG', %s, %s,"
                    " %s)",
                    (job_id, attempt, name, value, _at(first)),
                )
            for key, start, end, status, message in steps:
                conn.execute(
                    "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key,"
                    " step_status, message, created_at, ended_at) VALUES ('render', %s,"
                    " 'thumbnail', %s, 'STEP', %s, %s, %s, %s, %s)",
                    (job_id, attempt, key, status, message, _at(start), _at(end)),
                )
            if final is not None:
                status, reason, detail, end = final
                conn.execute(
                    "INSERT INTO job_log (domain, job_id, job_type, attempt, status, reason,"
                    " detail, created_at) VALUES ('render', %s, 'thumbnail', %s, %s, %s, %s, %s)",
                    (job_id, attempt, status, reason, Jsonb(detail), _at(end)),
                )


def _pairs(dsn: str, job_id: str, a: int, b: int) -> list[tuple[Any, ...]]:
    diff = attempt_diff(dsn, "render", job_id, a, b)
    assert diff is not None
    return [
        (p.key, p.occurrence, p.a_status, _seconds(p.a_duration), p.b_status,
         _seconds(p.b_duration), _seconds(p.difference))
        for p in diff.steps
    ]  # fmt: skip


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def test_steps_align_by_key_and_run_with_durations_and_differences(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    record_histories(conn)
    assert _pairs(dsn, "J", 1, 2) == [
        ("FETCH", 1, "COMPLETED", 2.0, "COMPLETED", 1.0, -1.0),
        ("RENDER", 1, "COMPLETED", 3.0, "COMPLETED", 2.0, -1.0),
        ("RENDER", 2, None, None, "COMPLETED", 1.0, None),  # ran twice in 2 only
        ("CLEANUP", 1, None, None, "COMPLETED", 1.0, None),
        ("SAVE", 1, "FAILED", 1.0, "COMPLETED", 2.0, 1.0),
    ]
    # the other way round: a's order, a's side first
    assert _pairs(dsn, "J", 2, 1) == [
        ("FETCH", 1, "COMPLETED", 1.0, "COMPLETED", 2.0, 1.0),
        ("RENDER", 1, "COMPLETED", 2.0, "COMPLETED", 3.0, 1.0),
        ("RENDER", 2, "COMPLETED", 1.0, None, None, None),
        ("CLEANUP", 1, "COMPLETED", 1.0, None, None, None),
        ("SAVE", 1, "COMPLETED", 2.0, "FAILED", 1.0, -1.0),
    ]
    # b ran B before A, and C is still running (no duration yet)
    assert _pairs(dsn, "K", 1, 2) == [
        ("A", 1, "COMPLETED", 1.0, "COMPLETED", 1.0, 0.0),
        ("B", 1, "FAILED", 2.0, "COMPLETED", 2.0, 0.0),
        ("C", 1, None, None, "RUNNING", None, None),
    ]


@pytest.mark.parametrize(
    ("job_id", "a", "b", "divergence", "index"),
    [
        pytest.param("J", 1, 2, "RENDER", 2, id="a-second-run"),
        pytest.param("K", 1, 2, "B", 1, id="status"),
        pytest.param("S", 1, 2, None, None, id="none"),
        pytest.param("S", 2, 2, None, None, id="itself"),
    ],
)
def test_first_divergence(
    dsn: str,
    conn: psycopg.Connection[Any],
    job_id: str,
    a: int,
    b: int,
    divergence: str | None,
    index: int | None,
) -> None:
    record_histories(conn)
    diff = attempt_diff(dsn, "render", job_id, a, b)
    assert diff is not None
    assert (diff.first_divergence, diff.divergence_index) == (divergence, index)
    assert diff.to_dict()["first_divergence"] == divergence


def test_each_attempt_says_why_it_failed_and_its_tags(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    record_histories(conn)
    diff = attempt_diff(dsn, "render", "J", 1, 2)
    assert diff is not None
    a, b = diff.to_dict()["a"], diff.to_dict()["b"]
    assert (a["status"], a["error"], a["failed_step"], a["failed_message"]) == (
        "FAILED", "OSError: disk full", "SAVE", "OSError: disk full"
    )  # fmt: skip
    assert a["detail"] == {"step": "SAVE", "error": "OSError: disk full"}
    assert (a["tags"], b["tags"]) == ({"customer": "acme"}, {"customer": "acme", "region": "eu"})
    assert (b["status"], b["error"], b["failed_step"]) == ("COMPLETED", None, None)
    assert (a["started_at"], b["ended_at"]) == (BASE.isoformat(), (BASE + 68 * SECOND).isoformat())
    other = attempt_diff(dsn, "render", "K", 1, 2)
    assert other is not None
    assert (other.a.reason, other.a.failed_message) == ("time_limit", "too slow")
    assert (other.b.status, other.b.ended_at) == ("RUNNING", None)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        pytest.param(0, 1, id="zero"),
        pytest.param(1, -2, id="negative"),
        pytest.param(True, 2, id="bool"),
        pytest.param("1", 2, id="text"),
        pytest.param(1, 2**31, id="above-the-column"),
    ],
)
def test_a_number_that_is_no_attempt_is_refused(dsn: str, a: Any, b: Any) -> None:
    with pytest.raises(ConfigurationError, match="must be"):
        attempt_diff(dsn, "render", "J", a, b)


def test_an_attempt_without_rows_reads_as_none(dsn: str, conn: psycopg.Connection[Any]) -> None:
    record_histories(conn)
    assert attempt_diff(dsn, "render", "J", 1, 3) is None
    assert attempt_diff(dsn, "render", "nobody", 1, 2) is None
    assert attempt_diff(conn, "render", "J", 1, 2) is not None  # a caller's connection too


def test_show_diff_prints_the_aligned_table(
    dsn: str, conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    record_histories(conn)
    assert main(["show", "render", "J", "--dsn", dsn, "--diff", "1", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == [
        "render / J: attempt 1 FAILED vs attempt 2 COMPLETED",
        "first divergence: RENDER (run 2)",
        "",
    ]
    table = [line.split("  ") for line in out[3:9]]
    assert [[cell.strip() for cell in row if cell.strip()] for row in table] == [
        ["STEP", "ATTEMPT 1", "TOOK", "ATTEMPT 2", "TOOK", "DIFFERENCE"],
        ["FETCH", "COMPLETED", "2.00s", "COMPLETED", "1.00s", "-1.00s"],
        ["RENDER", "COMPLETED", "3.00s", "COMPLETED", "2.00s", "-1.00s"],
        ["RENDER (run 2) *", "-", "-", "COMPLETED", "1.00s", "-"],
        ["CLEANUP", "-", "-", "COMPLETED", "1.00s", "-"],
        ["SAVE", "FAILED", "1.00s", "COMPLETED", "2.00s", "+1.00s"],
    ]
    assert out[9:] == [
        "attempt 1: FAILED  error OSError: disk full  failed step SAVE: OSError: disk full"
        "  tags customer=acme",
        "attempt 2: COMPLETED  tags customer=acme, region=eu",
    ]


def test_show_diff_neutralises_job_strings_and_says_what_is_missing(
    dsn: str, conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    record_histories(conn)
    assert main(["show", "render", "H", "--dsn", dsn, "--diff", "1", "2"]) == 0
    out = capsys.readouterr().out
    assert not {"\x1b", "\x07"} & set(out)
    assert "<b>x</b>\\x1b[2J\\n *" in out  # the key, escaped, starred on its one line
    assert "who=<img src=x onerror=alert(1)>\\x1b[31m" in out
    assert main(["show", "render", "H", "--dsn", dsn, "--diff", "1", "2", "--json"]) == 0
    assert '"first_divergence": "<b>x</b>\\u001b[2J\\n"' in capsys.readouterr().out
    assert main(["show", "render", "H", "--dsn", dsn, "--diff", "1", "9"]) == EXIT_NOT_FOUND
    assert capsys.readouterr().err.strip() == "otel-jobsteps: no attempt 1 or 9 of job render / H"
    for bad in ("0", "x", "1.5", "-1"):
        with pytest.raises(SystemExit) as exited:
            main(["show", "render", "H", "--dsn", dsn, "--diff", "1", bad])
        assert exited.value.code == 2
        assert "expected an integer from 1 to" in capsys.readouterr().err
