"""Paging of the jobs list with a tag (``?tag=``) or an id prefix (``?q=``), and of
``/api/jobs?tag=``: every job once over the pages, Newer/Previous back through the same pages."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from urllib.parse import quote

import psycopg
import pytest
from starlette.testclient import TestClient

from otel_jobsteps import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID, JOB_STEP_KEY, JOB_TYPE
from tests.helpers import TracingFactory
from tests.web.support import tagged_job

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
JOB_LINK = re.compile(r'class="job-link" href="/jobs/([^/"]+)/([^"]+)"')
PAGER = re.compile(r'<a class="(newest|newer|older)" href="([^"]+)"')


def jobs_on(html: str) -> list[str]:
    return [f"{domain}/{job}" for domain, job in JOB_LINK.findall(html)]


def pager(html: str) -> dict[str, str]:
    return {name: href.replace("&amp;", "&") for name, href in PAGER.findall(html)}


def walk(client: TestClient, first: str) -> tuple[list[list[str]], list[list[str]]]:
    """The jobs of every page from ``first`` following Older, then of the pages Newer walks
    back through from the last one."""
    pages: list[list[str]] = []
    url: str | None = first
    while url is not None:
        response = client.get(url)
        assert response.status_code == 200, response.text
        pages.append(jobs_on(response.text))
        links = pager(response.text)
        last, url = response.text, links.get("older")
        assert len(pages) < 50, "the pages do not end"
    back: list[list[str]] = []
    url = pager(last).get("newer")
    while url is not None:
        response = client.get(url)
        back.append(jobs_on(response.text))
        url = pager(response.text).get("newer")
    return pages, back


def tag_jobs(dsn: str, tracing: TracingFactory, count: int) -> list[str]:
    """``count`` jobs tagged customer=acme (every third also tagged in a second attempt, later;
    pairs of jobs share a start time) and one tagged otherwise; their ids, newest tag first."""
    tracer, processor = tracing()
    for n in range(count):
        tagged_job(tracer, f"inv-{n:02d}", 1, customer="acme")
        if n % 3 == 0:
            tagged_job(tracer, f"inv-{n:02d}", 2, customer="acme")
    tagged_job(tracer, "other", 1, customer="globex")
    assert processor.force_flush(10_000)
    with psycopg.connect(dsn) as conn:
        # tag n starts at minute n (ties in pairs); a second attempt an hour after the last
        conn.execute(
            "UPDATE job_event SET created_at = %s::timestamptz"
            " + (substr(job_id, 5)::int / 2) * interval '1 minute'"
            " + (attempt - 1) * interval '1 hour' WHERE job_id LIKE 'inv-%%' AND type = 'TAG'",
            (T0,),
        )
    newest = [n for n in range(count) if n % 3 == 0][::-1]
    rest = [n for n in reversed(range(count)) if n % 3]
    # within a tie, the higher id first (the page orders by time, domain, id, all descending)
    return [f"shop/inv-{n:02d}" for n in newest + rest]


@pytest.mark.parametrize("limit", [2, 5], ids=["scans-floor", "pages-full"])
def test_tagged_jobs_page_both_ways(
    client: TestClient, dsn: str, tracing: TracingFactory, limit: int
) -> None:
    expected = tag_jobs(dsn, tracing, 23)

    pages, back = walk(client, f"/?tag=customer:acme&limit={limit}")

    seen = [job for page in pages for job in page]
    assert seen == expected  # every tagged job once, newest tag first: none skipped
    assert len(pages) >= 23 // limit
    assert back == pages[-2::-1]


def test_tagged_jobs_with_a_filter_page_through_the_floor(
    client: TestClient, dsn: str, tracing: TracingFactory
) -> None:
    expected = tag_jobs(dsn, tracing, 40)
    with psycopg.connect(dsn) as conn:
        for table in ("job_event", "job_log"):
            conn.execute(
                f"UPDATE {table} SET job_type = 'refund' WHERE job_id IN ('inv-01', 'inv-38')"
            )

    pages, back = walk(client, "/?tag=customer:acme&type=refund&limit=1")

    assert [job for page in pages for job in page] == [
        job for job in expected if job in ("shop/inv-01", "shop/inv-38")
    ]
    assert back == pages[-2::-1]


def test_api_tagged_jobs_link_to_the_next_page(
    client: TestClient, dsn: str, tracing: TracingFactory
) -> None:
    expected = tag_jobs(dsn, tracing, 11)
    seen: list[str] = []
    url: str | None = "/api/jobs?tag=customer:acme&window=all&limit=3"
    while url is not None:
        response = client.get(url)
        assert response.status_code == 200
        seen += [f"{job['domain']}/{job['job_id']}" for job in response.json()]
        link = response.headers.get("link")
        url = re.fullmatch(r'<([^>]+)>; rel="next"', link).group(1) if link else None  # type: ignore[union-attr]
    assert seen == expected


def test_id_search_pages_in_id_order(client: TestClient, tracing: TracingFactory) -> None:
    tracer, processor = tracing()
    names = [("a", f"job-{n}") for n in range(5)] + [("b", f"job-{n}") for n in range(4)]
    names += [("b", "jobless"), ("c", "other-1")]
    for domain, job_id in names:
        attributes = {JOB_DOMAIN: domain, JOB_ID: job_id, JOB_TYPE: "t", JOB_ATTEMPT: 1}
        with tracer.start_as_current_span("job", attributes=attributes):  # type: ignore[arg-type]
            tracer.start_span("s", attributes={JOB_STEP_KEY: "S"}).end()
    assert processor.force_flush(10_000)

    pages, back = walk(client, "/?q=job&limit=3")

    matching = sorted(f"{d}/{j}" for d, j in names if j.startswith("job"))
    assert [job for page in pages for job in page] == matching
    assert [len(page) for page in pages] == [3, 3, 3, 1]
    assert back == pages[-2::-1]
    first = client.get("/?q=job&limit=3").text
    assert ">Next</a>" in first
    assert "Older" not in first
    only_b, _ = walk(client, "/?q=job-&domain=b&limit=2")
    assert only_b == [["b/job-0", "b/job-1"], ["b/job-2", "b/job-3"]]
    assert walk(client, "/?q=job-4")[0] == [["a/job-4"]]


def test_a_cursor_from_elsewhere_is_no_error(client: TestClient, tracing: TracingFactory) -> None:
    tracer, processor = tracing()
    tagged_job(tracer, "inv-1", 1, customer="acme")
    assert processor.force_flush(10_000)
    before = quote((T0 + timedelta(days=3650)).isoformat())
    # a time cursor on an id search, an id cursor on the time-ordered lists: a page each
    for url in (
        f"/?q=inv&before={before}",
        "/?tag=customer:acme&before_domain=shop&before_job=zzz",
        "/?before_domain=shop&before_job=zzz",
    ):
        assert client.get(url).status_code == 200
