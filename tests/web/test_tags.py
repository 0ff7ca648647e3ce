"""Tags (``job.tag.<name>`` on the job span): the same rows through both doors, kept within
their caps, shown on the job page and searchable from the jobs page, the JSON API and the CLI."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import psycopg
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Tracer
from starlette.testclient import TestClient

from otel_jobsteps import (
    JobStepsProcessor,
    job_detail,
    list_jobs,
)
from otel_jobsteps._core.translate import MAX_TAG_NAME_CHARS, MAX_TAG_VALUE_CHARS, MAX_TAGS
from otel_jobsteps.cli import main
from otel_jobsteps.web.rendering import job_url
from tests.helpers import TracingFactory, open_step
from tests.ingest.collector import CollectorFactory, table_rows
from tests.web.support import HOSTILE, tagged_job


def tell(tracer: Tracer) -> None:
    tagged_job(tracer, "inv-1", 1, customer="acme", region="eu", priority=3)
    tagged_job(tracer, "inv-1", 2, customer="acme", region="eu", priority=3)
    tagged_job(tracer, "inv-2", 1, customer="globex")
    tagged_job(tracer, "inv-3", 1)


def tag_rows(dsn: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT job_id, attempt, step_key, message FROM job_event WHERE type = 'TAG'"
            " ORDER BY job_id, attempt, step_key"
        ).fetchall()


def test_both_doors_store_the_same_tags_once_per_attempt(
    start_collect: CollectorFactory,
    dsn: str,
    second_dsn: str,
) -> None:
    collector = start_collect(second_dsn)
    provider = TracerProvider()
    provider.add_span_processor(JobStepsProcessor(dsn))
    exporter = OTLPSpanExporter(endpoint=collector.traces_url)
    provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=2))
    tell(provider.get_tracer("tests"))
    assert provider.force_flush(30_000)
    provider.shutdown()

    assert tag_rows(dsn) == [
        ("inv-1", 1, "customer", "acme"),
        ("inv-1", 1, "priority", "3"),
        ("inv-1", 1, "region", "eu"),
        ("inv-1", 2, "customer", "acme"),
        ("inv-1", 2, "priority", "3"),
        ("inv-1", 2, "region", "eu"),
        ("inv-2", 1, "customer", "globex"),
    ]
    assert table_rows(second_dsn) == table_rows(dsn)
    detail = job_detail(dsn, "shop", "inv-1")
    assert detail is not None
    assert detail.events == ()  # tags are no ordinary events


def test_tags_beyond_the_caps_are_dropped_or_cut(tracing: TracingFactory, dsn: str) -> None:
    tracer, processor = tracing()
    many = {f"t{n:02d}": n for n in range(MAX_TAGS + 5)}
    tagged_job(tracer, "caps", 1, **many, **{"x" * (MAX_TAG_NAME_CHARS + 1): "long name"})
    tagged_job(tracer, "long", 1, note="v" * (MAX_TAG_VALUE_CHARS + 10))
    assert processor.force_flush(10_000)

    rows = tag_rows(dsn)
    assert [r[2] for r in rows if r[0] == "caps"] == [f"t{n:02d}" for n in range(MAX_TAGS)]
    assert [r[3] for r in rows if r[0] == "long"] == ["v" * MAX_TAG_VALUE_CHARS]
    assert processor.stats()["dropped_tags"] == 1


def test_tags_show_on_the_job_page_and_filter_the_lists(
    tracing: TracingFactory, dsn: str, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    tracer, processor = tracing()
    tell(tracer)
    tagged_job(tracer, "evil", 1, **{HOSTILE: HOSTILE})
    assert processor.force_flush(10_000)

    page = client.get(job_url("shop", "inv-1")).text
    assert '<span class="tag-name">customer</span>=<span class="tag-value">acme</span>' in page
    assert 'href="/?tag=customer%3Dacme"' in page
    assert "<script>" not in client.get(job_url("shop", "evil")).text

    def listed(url: str) -> list[str]:
        return sorted(job["job_id"] for job in client.get(url).json())

    assert listed("/api/jobs?tag=customer:acme") == ["inv-1"]
    assert listed("/api/jobs?tag=customer:globex") == ["inv-2"]
    assert listed("/api/jobs?tag=customer:nobody") == []
    assert listed("/api/jobs?tag=priority:3&status=completed") == ["inv-1"]
    assert client.get("/api/jobs?tag=customer").status_code == 400
    html = client.get("/?tag=customer:acme").text
    assert 'href="/jobs/shop/inv-1"' in html
    assert 'href="/jobs/shop/inv-2"' not in html
    assert [j.job_id for j in list_jobs(dsn, tag=("region", "eu"))] == ["inv-1"]

    assert main(["jobs", "--dsn", dsn, "--tag", "customer=globex", "--json"]) == 0
    assert [job["job_id"] for job in json.loads(capsys.readouterr().out)] == ["inv-2"]
    with pytest.raises(SystemExit) as exit_info:
        main(["jobs", "--dsn", dsn, "--tag", "customer"])
    assert exit_info.value.code == 2


def test_every_stored_tag_is_found_by_its_own_link_and_the_cli(
    tracing: TracingFactory, dsn: str, client: TestClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """A name holding ':' or '=' could not be split back out of ``?tag=NAME:VALUE`` or ``--tag
    NAME=VALUE``: it is dropped at write (counted); values may hold either."""
    tracer, processor = tracing()
    tags = {"env:region": "eu", "a=b": "c", "url": "http://x/?q=1", "pair": "k=v:w"}
    tagged_job(tracer, "seps", 1, **tags)
    assert processor.force_flush(10_000)

    assert [(r[2], r[3]) for r in tag_rows(dsn)] == [("pair", "k=v:w"), ("url", "http://x/?q=1")]
    assert processor.stats()["dropped_tags"] == 1  # one attempt's problem, counted once
    links = re.findall(r'href="(/\?tag=[^"]*)"', client.get(job_url("shop", "seps")).text)
    assert len(links) == 2
    for link in links:
        assert 'href="/jobs/shop/seps"' in client.get(html.unescape(link)).text, link
    for name, value in (("pair", "k=v:w"), ("url", "http://x/?q=1")):
        assert main(["jobs", "--dsn", dsn, "--tag", f"{name}={value}", "--json"]) == 0
        assert [job["job_id"] for job in json.loads(capsys.readouterr().out)] == ["seps"]


def listed_statuses(page: str) -> list[str]:
    """The status of each job row of a jobs page, in order."""
    return re.findall(r'<tr class="job">.*?<span class="status (\w+)">', page, re.DOTALL)


def shown_counts(page: str) -> list[int]:
    """The COMPLETED, FAILED and RUNNING counts at the top of a jobs page."""
    return [
        int(re.search(rf'<span class="count-{status}">(\d+)</span>', page)[1])  # type: ignore[index]
        for status in ("completed", "failed", "running")
    ]


def test_counts_follow_the_filter_and_both_tag_forms_list_the_same(
    tracing: TracingFactory,
    client: TestClient,
    conn: psycopg.Connection[Any],
    dsn: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 36 item 11: a list filtered by tag or id prefix counts the jobs it lists (the
    fleet's counts ignored the filter); "1 open step"; ``=`` and ``:`` tags list the same."""
    tracer, processor = tracing()
    tell(tracer)  # inv-1 (acme), inv-2 (globex), inv-3: all completed
    assert processor.force_flush(10_000)
    open_step(conn, "inv-9", age="1 minute")  # a running job of another domain, untagged

    fleet = client.get("/").text
    assert shown_counts(fleet) == [4, 0, 1]  # attempts ended, steps open now
    assert '<span class="count-running">1</span> open step</li>' in fleet
    for url in ("/?tag=customer=acme", "/?tag=customer:acme", "/?q=inv-", "/?q=inv-9"):
        page = client.get(url).text
        statuses = listed_statuses(page)
        assert statuses, url
        expected = [statuses.count(s) for s in ("completed", "failed", "running")]
        assert shown_counts(page) == expected, url
    assert shown_counts(client.get("/?q=inv-").text) == [3, 0, 1]  # jobs, not attempts
    assert shown_counts(client.get("/?tag=customer=acme").text) == [1, 0, 0]
    assert '<span class="count-completed">1</span> job</li>' in client.get("/?q=inv-1").text

    equal_forms = client.get("/?tag=customer=acme").text
    colon_form = client.get("/?tag=customer:acme").text
    assert 'href="/jobs/shop/inv-1"' in equal_forms
    assert 'href="/jobs/shop/inv-2"' not in equal_forms
    assert listed_statuses(equal_forms) == listed_statuses(colon_form)
    assert re.findall(r'class="job-link" href="([^"]*)"', equal_forms) == re.findall(
        r'class="job-link" href="([^"]*)"', colon_form
    )
    api = [client.get(f"/api/jobs?tag=customer{sep}acme").json() for sep in "=:"]
    assert api[0] == api[1]
    assert [job["job_id"] for job in api[0]] == ["inv-1"]
    listed = []
    for form in ("customer=acme", "customer:acme"):
        assert main(["jobs", "--dsn", dsn, "--tag", form, "--json"]) == 0
        listed.append([job["job_id"] for job in json.loads(capsys.readouterr().out)])
    assert listed == [["inv-1"], ["inv-1"]]
    # one form shown: the chips and their links say NAME=VALUE
    chips = client.get(job_url("shop", "inv-1")).text
    assert 'href="/?tag=customer%3Dacme"' in chips
    assert "%3A" not in chips
