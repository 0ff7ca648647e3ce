"""A job retried 10,000 times (issue 36 item 3): its page, its JSON and ``show`` list the first,
the latest, the failed and the newest attempts, say how many there are and how many each gap
leaves out, and page back to the earliest; each answer stays small (the issue measured 15 MB,
3.4 MB and 0.9 MB; this job gave 23 MB, 4.8 MB and 1.5 MB before)."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from otel_jobsteps.cli import main
from otel_jobsteps.query import NEWEST_ATTEMPTS
from otel_jobsteps.web.rendering import job_url
from tests.web.support import retried_job

ATTEMPTS = 10_000
FAILED = list(range(1000, ATTEMPTS, 1000))  # the latest, 10,000, is still running
NEWEST = list(range(ATTEMPTS - NEWEST_ATTEMPTS + 1, ATTEMPTS + 1))
LISTED = [1, *FAILED, *NEWEST]
PAGE_BYTES = 200_000  # measured 74 kB (23 MB before)
API_BYTES = 50_000  # measured 15 kB (4.8 MB before)
CLI_BYTES = 20_000  # measured 6 kB (1.5 MB before)


@pytest.fixture
def retried(conn: psycopg.Connection[Any]) -> str:
    retried_job(conn, ATTEMPTS)
    return job_url("mail", "retried")


def lanes(page: str) -> list[int]:
    """The attempts a job page draws, in order."""
    return [int(n) for n in re.findall(r'<section class="attempt[^"]*" data-attempt="(\d+)"', page)]


def gap_links(page: str) -> dict[int, tuple[str, int]]:
    """The "N earlier attempts" links of a job page by the attempt they stand before: (URL, N)."""
    found = re.findall(
        r'<p class="more attempts-gap"><a href="([^"]*)">(\d+) earlier attempts?</a></p>\s*'
        r'<section class="attempt[^"]*" data-attempt="(\d+)"',
        page,
    )
    return {int(before): (url.replace("&amp;", "&"), int(n)) for url, n, before in found}


def test_the_page_lists_the_first_latest_failed_and_newest_and_pages_back(
    client: TestClient, retried: str
) -> None:
    response = client.get(retried)
    assert response.status_code == 200
    assert len(response.content) < PAGE_BYTES
    page = response.text
    assert lanes(page) == LISTED
    assert "<div><dt>Attempts</dt><dd>10000 (30 listed" in page
    assert 'class="attempt selected" data-attempt="10000"' in page
    links = gap_links(page)
    assert sorted(links) == [*FAILED, NEWEST[0]]
    assert sum(n for _, n in links.values()) == ATTEMPTS - len(LISTED)
    assert links[1000][1] == 998  # 2 to 999

    # Older pages abut: each lists the newest attempts below the last one's
    before = NEWEST[0]
    for _ in range(2):
        url = links[before][0]
        assert f"before_attempt={before}" in url
        older = client.get(url).text
        window = list(range(before - NEWEST_ATTEMPTS, before))
        assert [n for n in lanes(older) if n not in (1, *FAILED, ATTEMPTS)] == window
        links, before = gap_links(older), window[0]
        assert len(older.encode()) < PAGE_BYTES
    # ... down to the earliest, where no gap is left below
    earliest = client.get(job_url("mail", "retried", before_attempt="22")).text
    assert lanes(earliest)[:21] == list(range(1, 22))
    assert min(gap_links(earliest)) == FAILED[0]
    # an attempt asked for is listed wherever it is, and selected
    chosen = client.get(job_url("mail", "retried", 5000 - 1)).text
    assert 'class="attempt selected" data-attempt="4999"' in chosen
    assert 4999 in lanes(chosen)
    assert client.get(job_url("mail", "retried", before_attempt="0")).status_code == 400


def test_the_api_pages_attempts_and_counts_them(client: TestClient, retried: str) -> None:
    response = client.get("/api" + retried)
    assert len(response.content) < API_BYTES
    detail = response.json()
    assert detail["attempt_count"] == ATTEMPTS
    assert [a["attempt"] for a in detail["attempts"]] == LISTED
    assert [a["status"] for a in detail["attempts"] if a["attempt"] in FAILED] == ["FAILED"] * 9
    assert detail["attempts"][-1]["status"] == "RUNNING"
    assert detail["attempt_gaps"][0] == {"before": 1000, "count": 998}
    assert detail["attempt_gaps"][-1] == {"before": NEWEST[0], "count": NEWEST[0] - 9000 - 1}
    assert {e["attempt"] for e in detail["events"]} == set(LISTED) - {ATTEMPTS}
    assert detail["stalled_count"] == 0

    older = client.get("/api" + job_url("mail", "retried", before_attempt=str(NEWEST[0]))).json()
    shown = [a["attempt"] for a in older["attempts"]]
    assert shown[-NEWEST_ATTEMPTS - 1 : -1] == list(range(NEWEST[0] - NEWEST_ATTEMPTS, NEWEST[0]))
    assert client.get("/api" + retried + "?before_attempt=x").status_code == 400


def test_show_lists_the_same_attempts_and_says_how_to_page(
    dsn: str, retried: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", "--dsn", dsn, "mail", "retried"]) == 0
    text = capsys.readouterr().out
    assert len(text.encode()) < CLI_BYTES
    assert "attempt 10000 of 10000" in text
    listed = [int(n) for n in re.findall(r"^  #(\d+) ", text, re.MULTILINE)]
    assert listed[: len(LISTED)] == LISTED  # then the events of the attempts listed
    assert f"... 980 earlier attempts (--before-attempt {NEWEST[0]})" in text
    assert "... 998 earlier attempts (--before-attempt 1000)" in text

    assert main(["show", "--dsn", dsn, "mail", "retried", "--before-attempt", "22"]) == 0
    text = capsys.readouterr().out
    listed = [int(n) for n in re.findall(r"^  #(\d+) ", text, re.MULTILINE)]
    assert listed[:21] == list(range(1, 22))
    assert main(["show", "--dsn", dsn, "mail", "retried", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["attempt_count"], len(shown["attempts"])) == (ATTEMPTS, len(LISTED))
