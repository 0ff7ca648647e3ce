"""Overdue steps (issue 40 item 3): a running step past its (job type, step key)'s p99 of the
last 7 days x the factor is overdue in /api/running, on /running and in /metrics' gauge; fewer
than 20 completed steps, or only older ones, and it never is. Every duration is known: the 20
completed SAVE steps ran 1 .. 20 s, so p99 = 1 + 0.99 x 19 = 19.81 s, and x 3 = 59.43 s."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from otel_jobsteps.cli import main
from otel_jobsteps.errors import ConfigurationError, DatabaseUnavailableError
from otel_jobsteps.web import create_app
from otel_jobsteps.web.overdue import REFRESH_AFTER, Baseline, Baselines
from tests.helpers import wait_until

HOSTILE_ID = "<img src=x onerror=alert(1)>"
# (job id, job type, step key, seconds running): open steps; the limit of thumbnail/SAVE and of
# NULL/SAVE is 59.43 s, FEW has 19 samples, OLD 20 from 8 days ago.
OPEN = [
    ("under", "thumbnail", "SAVE", 50),
    (HOSTILE_ID, "thumbnail", "SAVE", 70),
    ("untyped", None, "SAVE", 70),
    ("few", "thumbnail", "FEW", 3600),
    ("old", "thumbnail", "OLD", 3600),
]


def _completed(
    conn: psycopg.Connection[Any], job_type: str | None, key: str, count: int, ended_ago: str
) -> None:
    """``count`` completed steps of 1, 2, .. ``count`` seconds, ended ``ended_ago``."""
    conn.execute(
        "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,"
        " created_at, ended_at)"
        " SELECT 'render', %(key)s || '-' || n, %(type)s, 1, 'STEP', %(key)s, 'COMPLETED',"
        "        now() - %(ago)s::interval - n * interval '1 second', now() - %(ago)s::interval"
        " FROM generate_series(1, %(count)s) AS n",
        {"key": key, "type": job_type, "count": count, "ago": ended_ago},
    )


def _open(conn: psycopg.Connection[Any], rows: list[tuple[str, str | None, str, int]]) -> None:
    conn.cursor().executemany(
        "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,"
        " created_at) VALUES ('render', %s, %s, 1, 'STEP', %s, 'RUNNING',"
        " now() - %s * interval '1 second')",
        rows,
    )


@pytest.fixture
def history(conn: psycopg.Connection[Any]) -> None:
    _completed(conn, "thumbnail", "SAVE", 20, "1 hour")
    _completed(conn, None, "SAVE", 20, "1 hour")
    _completed(conn, "thumbnail", "FEW", 19, "1 hour")
    _completed(conn, "thumbnail", "OLD", 20, "8 days")
    # A failed SAVE of an hour is no sample: only completed steps make the baseline.
    conn.execute(
        "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,"
        " created_at, ended_at) VALUES ('render', 'failed', 'thumbnail', 1, 'STEP', 'SAVE',"
        " 'FAILED', now() - interval '2 hours', now() - interval '1 hour')"
    )
    _open(conn, OPEN)


def _overdue(client: TestClient) -> dict[str, bool]:
    reply = client.get("/api/running")
    assert reply.status_code == 200
    return {step["job_id"]: step["overdue"] for step in reply.json()}


def _gauges(client: TestClient, name: str) -> dict[tuple[str, str], float]:
    reply = client.get("/metrics")
    assert reply.status_code == 200
    (family,) = [f for f in text_string_to_metric_families(reply.text) if f.name == name]
    return {(s.labels["job_type"], s.labels["job_step_key"]): s.value for s in family.samples}


@pytest.mark.usefixtures("history")
def test_a_step_past_p99_times_the_factor_is_overdue(dsn: str) -> None:
    with TestClient(create_app(dsn)) as client:
        flags = _overdue(client)
        gauges = _gauges(client, "otel_jobsteps_overdue_steps")
        page = client.get("/running").text

    assert flags == {
        "under": False,  # 50 s < 59.43 s
        HOSTILE_ID: True,  # 70 s > 59.43 s
        "untyped": True,  # a NULL job type has its own baseline
        "few": False,  # 19 samples: no baseline
        "old": False,  # its samples are older than 7 days
    }
    assert gauges == {("thumbnail", "SAVE"): 1, ("", "SAVE"): 1, ("thumbnail", "FEW"): 0,
                      ("thumbnail", "OLD"): 0}  # fmt: skip
    badge = '<span class="badge overdue" title="running longer than 3 x the p99'
    assert page.count(badge) == 2
    assert HOSTILE_ID not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    hostile_row = page[page.index("&lt;img src=x") :].split("</tr>")[0]
    assert badge in hostile_row
    under_row = page[page.index(">under<") :].split("</tr>")[0]
    assert "badge overdue" not in under_row


@pytest.mark.usefixtures("history")
def test_the_factor_moves_the_limit(dsn: str) -> None:
    # x 4: 79.24 s, x 2: 39.62 s
    with TestClient(create_app(dsn, overdue_factor=4)) as client:
        assert _overdue(client)[HOSTILE_ID] is False
        assert _gauges(client, "otel_jobsteps_overdue_steps")[("thumbnail", "SAVE")] == 0
    with TestClient(create_app(dsn, overdue_factor=2)) as client:
        assert _overdue(client)["under"] is True
        assert _gauges(client, "otel_jobsteps_overdue_steps")[("thumbnail", "SAVE")] == 2


@pytest.mark.parametrize("factor", [0, -1, float("nan"), float("inf")])
def test_a_bad_factor_is_refused(dsn: str, factor: float) -> None:
    with pytest.raises(ConfigurationError, match="overdue factor"):
        create_app(dsn, overdue_factor=factor)


@pytest.mark.parametrize("raw", ["0", "-2", "nan", "inf", "three"])
def test_serve_refuses_a_bad_overdue_factor_in_one_line(
    raw: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--overdue-factor", raw])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"--overdue-factor: expected a number above 0, got {raw!r}" in line


def test_baselines_are_read_again_only_after_the_refresh_period(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    now = [0.0]
    clock: Callable[[], float] = lambda: now[0]  # noqa: E731
    _completed(conn, "thumbnail", "SAVE", 19, "1 hour")
    _open(conn, [("late", "thumbnail", "SAVE", 600)])
    with TestClient(create_app(dsn, clock=clock)) as client:
        assert _overdue(client) == {"late": False}  # 19 samples
        _completed(conn, "thumbnail", "SAVE", 1, "1 minute")  # the 20th
        now[0] += REFRESH_AFTER.total_seconds() - 1
        assert _overdue(client) == {"late": False}  # the cached baselines still answer
        now[0] += 1
        # This request starts the refresh in the background; a later one sees it.
        wait_until(lambda: _overdue(client)["late"], what="the baselines read again")
        assert _gauges(client, "otel_jobsteps_overdue_steps") == {("thumbnail", "SAVE"): 1}


def test_no_baseline_ever_makes_a_step_overdue(dsn: str, conn: psycopg.Connection[Any]) -> None:
    _open(conn, [("alone", "thumbnail", "SAVE", 10 * 24 * 3600)])
    with TestClient(create_app(dsn)) as client:
        assert _overdue(client) == {"alone": False}
        assert _gauges(client, "otel_jobsteps_overdue_steps") == {("thumbnail", "SAVE"): 0}


def test_a_failed_read_is_raised_first_then_the_old_limits_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    answers: list[list[Baseline] | Exception] = [
        DatabaseUnavailableError("database unreachable"),
        [Baseline("thumbnail", "SAVE", 10.0, 20)],
        DatabaseUnavailableError("database unreachable"),
    ]

    def read() -> list[Baseline]:
        answer = answers.pop(0) if answers else [Baseline("thumbnail", "SAVE", 10.0, 20)]
        if isinstance(answer, Exception):
            raise answer
        return answer

    baselines = Baselines(read, 2.5, clock=lambda: now[0])
    with pytest.raises(DatabaseUnavailableError):
        baselines.limits()  # no read succeeded yet: the request answers 503
    wanted = {"job_types": ["thumbnail"], "step_keys": ["SAVE"], "seconds": [25.0]}
    assert baselines.limits() == wanted
    now[0] += REFRESH_AFTER.total_seconds()
    with caplog.at_level(logging.WARNING, logger="otel_jobsteps.web"):
        assert baselines.limits() == wanted  # the refresh fails in the background
        handled = wait_until(
            lambda: [r.getMessage() for r in caplog.records], what="the failed refresh handled"
        )
    assert handled == ["serve: overdue baselines not read again: database unreachable"]
    assert baselines.limits() == wanted
