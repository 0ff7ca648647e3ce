"""The attempt diff on ``serve`` (issue 40 item 1): ``/api/jobs/{domain}/{job_id}/diff?a=&b=``,
its page with both waterfalls on one axis and the first divergence marked (in Chromium at
desktop and phone widths), the link from the job page, and one-line errors for bad numbers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from starlette.testclient import TestClient

from otel_jobsteps.web import create_app
from otel_jobsteps.web.rendering import diff_url, job_url
from tests.helpers import TracingFactory
from tests.integration.test_attempt_diff import BASE, HOSTILE_KEY, record_histories
from tests.web.support import live_server, record_timed_story

if TYPE_CHECKING:
    from playwright.sync_api import Page


def test_the_api_answers_the_aligned_steps_in_seconds(
    client: TestClient, conn: psycopg.Connection[Any]
) -> None:
    record_histories(conn)
    answer = client.get("/api/jobs/render/J/diff?a=1&b=2")
    assert answer.status_code == 200
    found = answer.json()
    assert found["first_divergence"] == "RENDER"
    assert [
        (s["key"], s["occurrence"], s["a_status"], s["a_duration"], s["b_status"],
         s["b_duration"], s["difference"])
        for s in found["steps"]
    ] == [
        ("FETCH", 1, "COMPLETED", 2.0, "COMPLETED", 1.0, -1.0),
        ("RENDER", 1, "COMPLETED", 3.0, "COMPLETED", 2.0, -1.0),
        ("RENDER", 2, None, None, "COMPLETED", 1.0, None),
        ("CLEANUP", 1, None, None, "COMPLETED", 1.0, None),
        ("SAVE", 1, "FAILED", 1.0, "COMPLETED", 2.0, 1.0),
    ]  # fmt: skip
    assert found["steps"][0]["a_started_at"] == BASE.isoformat()
    assert (found["a"]["error"], found["a"]["failed_step"]) == ("OSError: disk full", "SAVE")
    assert found["b"]["tags"] == {"customer": "acme", "region": "eu"}
    # the query form (for ids a path cannot carry) answers the same
    same = client.get("/api/diff?domain=render&job_id=J&a=1&b=2").json()
    assert {**same, "as_of": None} == {**found, "as_of": None}


@pytest.mark.parametrize(
    ("query", "status", "error"),
    [
        pytest.param("a=x&b=2", 400, "a must be an integer from 1 to 2147483647", id="word"),
        pytest.param("a=0&b=2", 400, "a must be an integer from 1 to 2147483647", id="zero"),
        pytest.param("a=1&b=-2", 400, "b must be an integer from 1 to 2147483647", id="minus"),
        pytest.param("a=1.5&b=2", 400, "a must be an integer from 1 to 2147483647", id="float"),
        pytest.param("a=%D9%A1&b=2", 400, "a must be an integer from 1 to 2147483647",
                     id="arabic-digit"),
        pytest.param("a=1&b=2147483648", 400, "b must be an integer from 1 to 2147483647",
                     id="past-the-column"),
        pytest.param("a=1", 400, "a and b (the attempt numbers to compare) are required",
                     id="no-b"),
        pytest.param("a=1&b=9", 404, "no such job, or it has no attempt 1 or 9", id="no-attempt"),
    ],
)  # fmt: skip
def test_bad_numbers_get_one_line(
    client: TestClient, conn: psycopg.Connection[Any], query: str, status: int, error: str
) -> None:
    record_histories(conn)
    answer = client.get(f"/api/jobs/render/J/diff?{query}")
    assert (answer.status_code, answer.json()) == (status, {"error": error})
    page = client.get(f"/jobs/render/J/diff?{query}")
    assert page.status_code == status
    assert "text/html" in page.headers["content-type"]
    unknown = client.get("/api/jobs/render/nobody/diff?a=1&b=2")
    assert unknown.status_code == 404


def test_the_job_page_links_its_latest_attempt_against_the_previous(
    client: TestClient, conn: psycopg.Connection[Any]
) -> None:
    record_histories(conn)
    href = diff_url("render", "J", 1, 2)
    assert href == "/jobs/render/J/diff?a=1&b=2"
    assert f'href="{href.replace("&", "&amp;")}"' in client.get(job_url("render", "J")).text
    conn.execute(
        "INSERT INTO job_event (domain, job_id, attempt, type, step_key, step_status, created_at,"
        " ended_at) VALUES ('render', 'single', 1, 'STEP', 'A', 'COMPLETED', now(), now())"
    )
    assert "diff-link" not in client.get(job_url("render", "single")).text


def test_an_id_with_a_slash_or_a_dot_keeps_its_page_and_its_diff(
    client: TestClient, conn: psycopg.Connection[Any]
) -> None:
    """``/diff`` ends the diff's path: a job named ``x/diff`` has its page at ``x%2Fdiff``."""
    for job_id in ("x/diff", ".."):
        for attempt, status in ((1, "FAILED"), (2, "COMPLETED")):
            conn.execute(
                "INSERT INTO job_event (domain, job_id, attempt, type, step_key, step_status,"
                " created_at, ended_at) VALUES ('render', %s, %s, 'STEP', 'A', %s, now(), now())",
                (job_id, attempt, status),
            )
        href = diff_url("render", job_id, 1, 2)
        assert client.get(job_url("render", job_id)).status_code == 200
        assert f'href="{href.replace("&", "&amp;")}"' in client.get(job_url("render", job_id)).text
        assert client.get("/api" + href).json()["first_divergence"] == "A"
        assert client.get(href).status_code == 200
    assert diff_url("render", "..", 1, 2) == "/diff?domain=render&job_id=..&a=1&b=2"


def test_job_strings_are_escaped_on_the_page(
    client: TestClient, conn: psycopg.Connection[Any]
) -> None:
    record_histories(conn)
    html = client.get("/jobs/render/H/diff?a=1&b=2").text
    assert "<b>x</b>" not in html
    assert "<script>" not in html
    assert "<img" not in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert 'class="row step failed diverges"' in html
    assert HOSTILE_KEY.startswith("<b>")


# -- in Chromium -------------------------------------------------------------------------------


@pytest.fixture
def base_url(dsn: str) -> Iterator[str]:
    with live_server(create_app(dsn)) as url:
        yield url


def _bars(page: Page, attempt: int) -> list[dict[str, Any]]:
    """The bars of one attempt's lane as drawn: key, status, divergence mark and pixel box."""
    found: list[dict[str, Any]] = page.eval_on_selector_all(
        f'.diff-waterfall .attempt[data-attempt="{attempt}"] .row',
        """rows => rows.map(row => {
            const box = row.querySelector('rect.bar').getBoundingClientRect();
            return {key: row.dataset.stepKey, run: Number(row.dataset.occurrence),
                    status: row.querySelector('rect.bar').dataset.status,
                    diverges: row.classList.contains('diverges'), x: box.x, width: box.width};
        })""",
    )
    return found


@pytest.mark.parametrize("width", [1280, 390])
def test_both_waterfalls_on_one_axis_with_the_divergence_marked(
    new_page: Callable[..., Page],
    base_url: str,
    conn: psycopg.Connection[Any],
    tracing: TracingFactory,
    width: int,
) -> None:
    record_histories(conn)
    tracer, processor = tracing()
    record_timed_story(tracer)  # through the processor: job 7, SAVE fails in 1, passes in 2
    assert processor.force_flush(10_000)
    phone = {"is_mobile": True, "has_touch": True, "device_scale_factor": 2} if width < 800 else {}
    page = new_page(viewport={"width": width, "height": 844}, **phone)

    page.goto(base_url + job_url("render", "7"))
    page.click("a.diff-link")
    page.wait_for_url("**/jobs/render/7/diff?a=1&b=2")
    first, second = _bars(page, 1), _bars(page, 2)
    assert [(b["key"], b["status"], b["diverges"]) for b in first] == [
        ("RENDER", "COMPLETED", False),
        ("SAVE", "FAILED", True),
    ]
    assert [(b["key"], b["status"], b["diverges"]) for b in second] == [
        ("RENDER", "COMPLETED", False),
        ("SAVE", "COMPLETED", True),
    ]
    # each from its own attempt's start: both RENDERs start at the axis' left, same length
    assert first[0]["x"] == pytest.approx(second[0]["x"], abs=1)
    assert first[0]["width"] == pytest.approx(second[0]["width"], abs=1)
    # SAVE took 1.5 s in 1 and 1 s in 2
    assert first[1]["width"] / second[1]["width"] == pytest.approx(1.5, rel=0.1)
    assert page.locator("#divergence").inner_text().startswith("First divergence: SAVE")
    assert page.locator("tr.diverges").get_attribute("data-step-key") == "SAVE"
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")

    page.goto(base_url + diff_url("render", "J", 1, 2))
    marked = [(b["key"], b["run"]) for lane in (1, 2) for b in _bars(page, lane) if b["diverges"]]
    assert marked == [("RENDER", 2)]  # only attempt 2 ran RENDER twice
    second = _bars(page, 2)
    # on one axis of 8 s (attempt 2's 60-68 s): SAVE starts at 5 s, CLEANUP 1 s wide
    left, right = second[0]["x"], second[-1]["x"]
    assert (right - left) / (second[2]["width"] * 5) == pytest.approx(1, rel=0.1)
    assert page.locator(".badge.divergence").count() == 1
    assert page.locator("tr.diverges").get_attribute("data-occurrence") == "2"
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    for row in page.locator(".diff-waterfall .row").all():
        box = row.bounding_box()
        assert box is not None
        assert 0 < box["width"] <= width - box["x"]
