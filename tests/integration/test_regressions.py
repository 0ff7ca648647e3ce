"""Regressions by release (issue 40 item 5): closed steps grouped by the service.version of
their attempt's final row, each release against the previous one, over histories whose every
time is known."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from otel_jobsteps.cli import main
from otel_jobsteps.web import create_app

# Two days ago, on a whole second: every time below is BASE + seconds.
BASE = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(days=2)
FIRST, SECOND = "b7", "a8"  # released in this order: their text sorts the other way
SINCE = ["steps", "--since", "3d", "--by-version"]

# (step key, seconds, failed) of one attempt's steps
Steps = list[tuple[str, int, bool]]


def release(
    conn: psycopg.Connection[Any],
    job_type: str,
    version: str | None,
    attempts: list[Steps],
    start: int,
) -> None:
    """One attempt per item of ``attempts``, each job its own, ten seconds apart from ``start``:
    its STEP rows back to back and its final row carrying ``version``."""
    for number, steps in enumerate(attempts):
        job_id = f"{job_type}-{version}-{number}"
        at = BASE + timedelta(seconds=start + 10 * number)
        for key, seconds, failed in steps:
            conn.execute(
                "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key,"
                " step_status, created_at, ended_at) VALUES ('render', %s, %s, 1, 'STEP', %s,"
                " %s, %s, %s)",
                (job_id, job_type, key, "FAILED" if failed else "COMPLETED", at,
                 at + timedelta(seconds=seconds)),
            )  # fmt: skip
            at += timedelta(seconds=seconds)
        status = "FAILED" if any(failed for _, _, failed in steps) else "COMPLETED"
        conn.execute(
            "INSERT INTO job_log (domain, job_id, job_type, attempt, status, created_at,"
            " service_version) VALUES ('render', %s, %s, 1, %s, %s, %s)",
            (job_id, job_type, status, at, version),
        )


def record_releases(conn: psycopg.Connection[Any]) -> None:
    """thumbnail: SAVE 2 s under FIRST, 6 s under SECOND (p95 3x); FETCH 1 s in both.
    digest: SEND fails 0 of 20 under FIRST, 2 of 20 (10 points more) under SECOND.
    tiny: 19 steps a release, 3x slower under SECOND: too few to compare."""
    release(conn, "thumbnail", FIRST, [[("FETCH", 1, False), ("SAVE", 2, False)]] * 20, 0)
    release(conn, "thumbnail", SECOND, [[("FETCH", 1, False), ("SAVE", 6, False)]] * 20, 1000)
    # a final row without a version (an older writer): left out
    release(conn, "thumbnail", None, [[("SAVE", 100, False)]] * 5, 2000)
    release(conn, "digest", FIRST, [[("SEND", 3, False)]] * 20, 100)
    release(conn, "digest", SECOND, [[("SEND", 3, i < 2)] for i in range(20)], 1100)
    release(conn, "tiny", FIRST, [[("RUN", 1, False)]] * 19, 200)
    release(conn, "tiny", SECOND, [[("RUN", 3, False)]] * 19, 1200)


def _summary(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (r["job_type"], r["step_key"], r["service_version"], r["steps"], r["failed"],
         r["p95_seconds"], r["previous_version"], r["p95_regressed"], r["failure_regressed"])
        for r in rows
    ]  # fmt: skip


EXPECTED = [
    ("digest", "SEND", FIRST, 20, 0, 3.0, None, False, False),
    ("digest", "SEND", SECOND, 20, 2, 3.0, FIRST, False, True),
    ("thumbnail", "FETCH", FIRST, 20, 0, 1.0, None, False, False),
    ("thumbnail", "FETCH", SECOND, 20, 0, 1.0, FIRST, False, False),
    ("thumbnail", "SAVE", FIRST, 20, 0, 2.0, None, False, False),
    ("thumbnail", "SAVE", SECOND, 20, 0, 6.0, FIRST, True, False),
    ("tiny", "RUN", FIRST, 19, 0, 1.0, None, False, False),
    ("tiny", "RUN", SECOND, 19, 0, 3.0, FIRST, False, False),
]


def test_the_slower_and_the_failing_release_are_flagged_and_only_they(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    record_releases(conn)
    with TestClient(create_app(dsn)) as client:
        found = client.get("/api/steps?by=version&window=all")
        lower = client.get("/api/steps?by=version&window=all&min_samples=19&p95_factor=3.5")
    assert found.status_code == 200
    assert _summary(found.json()) == EXPECTED
    save = found.json()[5]
    assert save["first_seen_at"] == (BASE + timedelta(seconds=1000 + 1 + 6)).isoformat()
    assert (save["previous_steps"], save["previous_p95_seconds"]) == (20, 2.0)
    assert found.json()[1]["failure_ratio"] == pytest.approx(0.1)
    # 19 samples each side now count; 3x is not more than 3.5x; the 10 points still are
    flagged = [(r["job_type"], r["p95_regressed"], r["failure_regressed"]) for r in lower.json()]
    assert [f for f in flagged if f[1] or f[2]] == [("digest", False, True)]


def test_the_window_leaves_older_steps_out(dsn: str, conn: psycopg.Connection[Any]) -> None:
    record_releases(conn)
    # Newer SAVE steps in a third release: within 1 h, only they are read (no previous one).
    conn.execute("UPDATE job_event SET created_at = created_at - interval '30 days',"
                 " ended_at = ended_at - interval '30 days'")  # fmt: skip
    conn.execute("UPDATE job_log SET created_at = created_at - interval '30 days'")
    release(conn, "thumbnail", "c9", [[("SAVE", 4, False)]] * 3, 2 * 86400 - 600)
    with TestClient(create_app(dsn)) as client:
        found = client.get("/api/steps?by=version&window=1h").json()
    assert _summary(found) == [("thumbnail", "SAVE", "c9", 3, 0, 4.0, None, False, False)]


def test_the_page_marks_the_regressed_releases_in_words(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    record_releases(conn)
    release(conn, "<i>t</i>", "<b>v</b>\x1b[2J", [[("<s>", 1, False)]], 300)
    with TestClient(create_app(dsn)) as client:
        steps = client.get("/steps?window=all")
        page = client.get("/steps?by=version&window=all")
        empty = client.get("/steps?by=version&window=1h")
    assert 'href="/steps?by=version&amp;window=all"' in steps.text
    assert page.status_code == 200
    body = page.text[page.text.index("<tbody>") :]
    rows = re.findall(r"<tr( class=\"regressed\")?>\s*(.*?)</tr>", body, re.S)
    marked = [
        re.sub(r"<[^>]+>", "", re.findall(r'data-label="Regression">(.*?)</td>', row)[0])
        for _, row in rows
    ]
    regressed = [cls for cls, _ in rows]
    assert marked == ["-", "-", "regressed: failures", "-", "-", "-", "regressed: p95", "-", "-"]
    assert regressed.count(' class="regressed"') == 2
    assert "&lt;b&gt;v&lt;/b&gt;" in page.text
    assert "<b>v</b>" not in page.text
    assert "&lt;i&gt;t&lt;/i&gt;" in page.text
    assert "<s>" not in page.text
    assert "No step of an attempt with a service.version closed within 1h." in empty.text


def test_steps_by_version_prints_the_table(
    dsn: str, conn: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    record_releases(conn)
    release(conn, "evil\u202e", "\x1b[2Jv1", [[("\x1b]0;x\x07", 1, False)]], 300)
    assert main(["--dsn", dsn, *SINCE]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "JOB", "TYPE", "STEP", "RELEASE", "COUNT", "FAILED", "FAILURE", "%", "P95", "AGAINST",
        "REGRESSION",
    ]  # fmt: skip
    cells = [line.split() for line in lines[1:]]
    assert [c[:3] for c in cells[:3]] == [
        ["digest", "SEND", FIRST], ["digest", "SEND", SECOND],
        ["evil\\u202e", "\\x1b]0;x\\x07", "\\x1b[2Jv1"],
    ]  # fmt: skip
    assert cells[1][3:] == ["20", "2", "10.0", "3.00s", FIRST, "REGRESSED:", "failures"]
    assert cells[6][2:] == [SECOND, "20", "0", "0.0", "6.00s", FIRST, "REGRESSED:", "p95"]
    assert [c[-1] for c in cells].count("-") == len(cells) - 2
    assert main(["--dsn", dsn, *SINCE, "--json", "--min-samples", "19"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [(r["job_type"], r["p95_regressed"]) for r in printed if r["p95_regressed"]] == [
        ("thumbnail", True),
        ("tiny", True),
    ]
    assert main(["--dsn", dsn, "steps", "--since", "1h", "--by-version"]) == 0
    assert capsys.readouterr().out == (
        "no steps closed of attempts with a service.version in the last 1h\n"
    )


@pytest.mark.parametrize(
    "query",
    ["by=versions", "p95_factor=abc", "p95_factor=0.5", "p95_factor=nan", "p95_factor=1e3",
     "failure_points=-1", "failure_points=101", "min_samples=0", "min_samples=2.5",
     "min_samples=" + "9" * 50],
)  # fmt: skip
def test_bad_thresholds_answer_400(dsn: str, query: str) -> None:
    with TestClient(create_app(dsn)) as client:
        page = client.get(f"/steps?by=version&{query}")
        api = client.get(f"/api/steps?by=version&{query}")
    assert (page.status_code, api.status_code) == (400, 400)
    assert "9" * 41 not in page.text


@pytest.mark.parametrize(
    "args",
    [["--p95-factor", "x"], ["--failure-points", "200"], ["--min-samples", "-3"],
     ["--retry-tax"]],
)  # fmt: skip
def test_bad_thresholds_exit_2(
    dsn: str, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--dsn", dsn, *SINCE, *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("otel-jobsteps: error: ")
