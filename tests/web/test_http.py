"""The web page over HTTP (starlette's TestClient, real PostgreSQL): status codes, JSON,
escaping, security headers, auth rules, the read-only role and a database that goes away."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from markupsafe import escape
from psycopg import sql
from psycopg.conninfo import make_conninfo
from starlette.testclient import TestClient

from otel_jobsteps import JOB_STEP_DETAIL, ConfigurationError, job_attempt, job_detail, step
from otel_jobsteps._cli.demo import record_seed_story
from otel_jobsteps._http.listen import parse_listen
from otel_jobsteps._http.loopback import loopback_hosts
from otel_jobsteps.cli import main
from otel_jobsteps.web import create_app
from otel_jobsteps.web.data import Reader
from otel_jobsteps.web.rendering import job_url
from otel_jobsteps.web.security import CSP, check_exposure
from tests.faults.proxy import FaultProxy, Mode, Upstream
from tests.helpers import TracingFactory
from tests.web.support import HOSTILE, ODD_JOBS

SECRET = "hunter2-never-shown"


class Markup(HTMLParser):
    """What a page's markup holds: tags with attributes, and script bodies."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_text: list[str] = []
        self._in_script = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.script_text.append(data)

    def all(self, tag: str, **attrs: str) -> list[dict[str, str | None]]:
        return [
            a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())
        ]


def test_job_page_shows_the_seed_story(client: TestClient, two_attempts: str) -> None:
    response = client.get(job_url("render", two_attempts))

    assert response.status_code == 200
    page = Markup(response.text)
    lanes = page.all("section", **{"class": "attempt"})
    lanes += page.all("section", **{"class": "attempt selected"})
    assert sorted(lane["data-attempt"] or "" for lane in lanes) == ["1", "2"]
    rows = [(a["data-attempt"], a["data-step-key"]) for a in page.all("li") if "data-step-key" in a]
    assert rows == [("1", "RENDER"), ("1", "SAVE"), ("2", "RENDER"), ("2", "SAVE")]
    bars = [(a["data-key"], a["class"]) for t, a in page.tags if t == "rect" and a.get("data-key")]
    assert bars == [
        ("RENDER", "bar completed"),
        ("SAVE", "bar failed"),
        ("RENDER", "bar completed"),
        ("SAVE", "bar completed"),
    ]
    assert "OSError: disk full" in response.text
    assert len(page.all("rect", **{"class": "mark", "data-type": "STALLED"})) == 2
    # a trace link per attempt, and the selected step's span link in its panel
    links = [a["href"] or "" for a in page.all("a", **{"class": "trace"})]
    assert len(links) == 2
    assert all(re.match(r"http://jaeger\.example:16686/trace/[0-9a-f]{32}\?", u) for u in links)
    assert not any(re.search(r"uiFind=[0-9a-f]{16}&", u) for u in links)
    chosen = client.get(job_url("render", two_attempts, 1, "SAVE"))
    links = [a["href"] or "" for a in Markup(chosen.text).all("a", **{"class": "trace"})]
    assert sum(bool(re.search(r"uiFind=[0-9a-f]{16}&", u)) for u in links) == 1


def test_attempt_parameter_selects_the_steps_shown(client: TestClient, two_attempts: str) -> None:
    first = client.get(job_url("render", two_attempts, 1))
    selected = Markup(first.text).all("section", **{"class": "attempt selected"})
    chosen = client.get(job_url("render", two_attempts, 1, "SAVE"))
    row = Markup(chosen.text).all("li", **{"class": "row step failed chosen"})

    assert first.status_code == chosen.status_code == 200
    assert [s["data-attempt"] for s in selected] == ["1"]
    assert "Select a step" in first.text
    assert [r["data-step-key"] for r in row] == ["SAVE"]
    assert '<dd class="message">OSError: disk full</dd>' in chosen.text
    # a key the attempt does not have selects nothing
    assert "Select a step" in client.get(job_url("render", two_attempts, 1, "NOPE")).text
    assert client.get(job_url("render", two_attempts, 9)).status_code == 404
    assert client.get(job_url("render", "no-such-job")).status_code == 404
    assert client.get(job_url("render", two_attempts) + "?attempt=x").status_code == 400


def test_api_returns_the_read_api_as_json(client: TestClient, dsn: str, two_attempts: str) -> None:
    detail = job_detail(dsn, "render", two_attempts)
    assert detail is not None

    got = client.get("/api" + job_url("render", two_attempts)).json()
    listed = client.get("/api/jobs").json()

    expected = detail.to_dict()
    assert {k: v for k, v in got.items() if k != "as_of"} == {
        k: v for k, v in expected.items() if k != "as_of"
    }
    assert [(j["domain"], j["job_id"], j["status"]) for j in listed] == [
        ("render", two_attempts, "COMPLETED")
    ]
    assert client.get("/api/jobs?status=failed").json() == []
    assert client.get("/api/jobs/render/nothing").status_code == 404
    bad = client.get("/api/jobs?status=bogus")
    assert bad.status_code == 400
    assert "status must be one of" in bad.json()["error"]


def test_every_listed_job_has_a_working_permalink(
    client: TestClient, tracing: TracingFactory
) -> None:
    tracer, processor = tracing()
    for domain, job_id in ODD_JOBS:
        record_seed_story(tracer, job_id, domain=domain, attempts=(2,))
    assert processor.force_flush(10_000)

    links = [
        a["href"] or "" for a in Markup(client.get("/").text).all("a", **{"class": "job-link"})
    ]
    assert len(links) == len(ODD_JOBS)
    shown = []
    for href in links:
        page, api = client.get(href), client.get("/api" + href)
        assert page.status_code == api.status_code == 200, href
        domain, job_id = api.json()["domain"], api.json()["job_id"]
        heading = f'<span class="domain">{escape(domain)}</span> / '
        assert heading + f'<span class="job-id">{escape(job_id)}</span>' in page.text, href
        shown.append((domain, job_id))
    assert sorted(shown) == sorted(ODD_JOBS)
    # the attempt links and the JSON link of the query form keep the job
    dots = client.get(job_url("render", "..", 2))  # attempts_made 1: the second attempt
    assert dots.status_code == 200
    assert (
        Markup(dots.text).all("section", **{"class": "attempt selected"})[0]["data-attempt"] == "2"
    )
    assert client.get("/api" + job_url("render", ".", 2)).json()["job_id"] == "."
    # a path with literal slashes still splits as before: domain first, the rest is the id
    assert client.get("/api/jobs/a/b/7").json()["domain"] == "a"
    assert client.get("/job?domain=render").status_code == 400
    assert client.post(job_url("a/b", "7")).status_code == 405


@pytest.mark.parametrize(
    "path", ["/", "/running", "/steps", "/api/jobs", "/static/app.css", "/jobs/render/42"]
)
def test_every_response_carries_a_strict_policy(
    client: TestClient, two_attempts: str, path: str
) -> None:
    response = client.get(path)

    assert response.status_code == 200
    assert response.headers["content-security-policy"] == CSP
    assert "'unsafe-inline'" not in CSP
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"


def test_pages_have_no_inline_script_or_style(client: TestClient, two_attempts: str) -> None:
    for path in ("/", job_url("render", two_attempts), "/running", "/steps"):
        page = Markup(client.get(path).text)
        scripts = page.all("script")
        assert [s["src"] for s in scripts] == ["/static/live.js"]
        assert page.script_text == []
        for _tag, attrs in page.tags:
            assert "style" not in attrs
            assert not [name for name in attrs if name.startswith("on")]


def test_hostile_strings_are_text_everywhere(
    client: TestClient, hostile: str, tracing: TracingFactory
) -> None:
    tracer, processor = tracing()
    with job_attempt("evil", "open", HOSTILE, tracer=tracer):
        with step(HOSTILE, tracer=tracer):
            assert processor.force_flush(10_000)
            pages = {
                path: client.get(path)
                for path in (
                    "/",
                    job_url("evil", hostile),
                    job_url("evil", "open"),
                    "/running",
                    "/steps",
                    "/steps/failures?" + f"type={quote(HOSTILE)}&key={quote(HOSTILE)}",
                    "/?q=" + quote(hostile),
                )
            }

    for path, response in pages.items():
        assert response.status_code == 200, path
        assert "<script>window" not in response.text, path
        assert "<img src=x" not in response.text, path
        assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in response.text, path
    job_page = pages[job_url("evil", hostile)].text
    assert job_page.count("&lt;img src=x onerror=") >= 4  # key, detail, message, event, type
    # the permalink of a hostile id round-trips through its percent-encoding
    assert 'href="' + job_url("evil", hostile) + '"' in pages["/"].text


def test_jobs_page_filters_searches_and_pages(client: TestClient, tracing: TracingFactory) -> None:
    tracer, processor = tracing()
    for number in range(7):
        record_seed_story(
            tracer, f"job-{number}", domain="render", attempts=(2,) if number % 3 else (1,)
        )
    assert processor.force_flush(10_000)

    def job_ids(html: str) -> list[str]:
        return re.findall(r'class="job-link" href="/jobs/render/([^"]+)"', html)

    def link(html: str, name: str) -> str | None:
        found = Markup(html).all("a", **{"class": name})
        return found[0]["href"] if found else None

    shown: list[list[str]] = []
    url: str | None = "/?limit=3"
    while url is not None:
        response = client.get(url)
        assert response.status_code == 200
        shown.append(job_ids(response.text))
        last = response.text
        url = link(last, "older")
    seen = [job for page in shown for job in page]
    assert len(shown) >= 3
    assert sorted(seen) == [f"job-{n}" for n in range(7)]
    assert len(seen) == len(set(seen))
    # Newer goes back through the same pages, the first page has none
    back: list[list[str]] = []
    url = link(last, "newer")
    while url is not None:
        response = client.get(url)
        back.append(job_ids(response.text))
        url = link(response.text, "newer")
    assert back == shown[-2::-1]
    assert link(client.get("/?limit=3").text, "newer") is None
    assert link(last, "newest") == "/?limit=3"
    assert client.get("/?back=nonsense").status_code == 400

    first_page = client.get("/").text
    assert '<td data-label="Attempt">1 of 1</td>' in first_page  # attempt 1 of the failed ones
    # attempt 2 started with attempts_made=1
    assert '<td data-label="Attempt">2 (1 recorded)</td>' in first_page

    failed = job_ids(client.get("/?status=failed").text)
    assert sorted(failed) == ["job-0", "job-3", "job-6"]
    assert job_ids(client.get("/?status=completed&type=thumbnail").text) != []
    assert job_ids(client.get("/?type=invoice").text) == []
    assert job_ids(client.get("/?q=job-4").text) == ["job-4"]
    assert sorted(job_ids(client.get("/?q=job-").text)) == [f"job-{n}" for n in range(7)]
    assert job_ids(client.get("/?q=jo").text) != []
    assert job_ids(client.get("/?q=job-4&domain=other").text) == []
    assert job_ids(client.get("/?q=job-45").text) == []
    counts = Markup(first_page)
    assert '<span class="count-failed">3</span>' in first_page
    assert '<span class="count-completed">4</span>' in first_page
    assert counts.all("main", id="live")[0].get("data-refresh-ms") is None
    assert "data-refresh-ms" in client.get("/?live=1").text  # live refresh only when asked
    assert '<span class="error" title="OSError: disk full">OSError: disk full</span>' in (
        client.get("/?status=failed").text
    )
    assert client.get("/?window=3y").status_code == 400
    assert client.get("/?before=yesterday").status_code == 400


@pytest.mark.parametrize(
    ("detail", "bar"),
    [('{"pct": 40}', True), ('{"pct": 1' + "0" * 400 + "}", False),
     ('{"progress": 1, "total": 1' + "0" * 400 + "}", False)],
    ids=["pct-40", "pct-past-a-float", "total-past-a-float"],
)  # fmt: skip
def test_a_progress_number_past_a_float_draws_no_bar(
    client: TestClient, tracing: TracingFactory, detail: str, bar: bool
) -> None:
    """Job code's detail JSON may hold an int no float holds: the page answers, without a bar."""
    tracer, processor = tracing()
    with job_attempt("render", "big", "t", tracer=tracer):
        with step("RENDER", tracer=tracer) as span:
            span.add_event("progress", {JOB_STEP_DETAIL: detail})
            assert processor.force_flush(10_000)
            pages = [
                client.get(job_url("render", "big")),
                client.get("/job?domain=render&job_id=big"),
            ]
    for page in pages:
        assert page.status_code == 200
        assert bool(Markup(page.text).all("progress", **{"class": "row-progress"})) is bar


def test_running_page_lists_open_steps(client: TestClient, tracing: TracingFactory) -> None:
    tracer, processor = tracing()
    with job_attempt("render", "busy", "thumbnail", tracer=tracer):
        with step("RENDER", tracer=tracer):
            assert processor.force_flush(10_000)
            everything = client.get("/running")
            silent_long = client.get("/running?silent=1h")
            api = client.get("/api/running").json()
            job_page = client.get(job_url("render", "busy"))
    assert processor.force_flush(10_000)

    assert 'href="/jobs/render/busy?attempt=1"' in everything.text
    assert "1 open step," in everything.text
    assert "data-refresh-ms" in everything.text
    assert "busy" not in silent_long.text
    assert [(s["job_id"], s["step_key"]) for s in api] == [("busy", "RENDER")]
    # a job with a step open refreshes itself and shows how long it has been silent
    assert "data-refresh-ms" in job_page.text
    assert "silent for" in job_page.text
    assert "data-refresh-ms" not in client.get(job_url("render", "busy")).text


def test_steps_page_links_to_recent_failures(client: TestClient, two_attempts: str) -> None:
    response = client.get("/steps")
    stats = {(s["job_type"], s["step_key"]): s for s in client.get("/api/steps").json()}
    link = "/steps/failures?type=thumbnail&amp;key=SAVE&amp;window=24h"
    failures = client.get(link.replace("&amp;", "&"))

    assert (stats["thumbnail", "SAVE"]["steps"], stats["thumbnail", "SAVE"]["failed"]) == (2, 1)
    assert link in response.text
    assert "50.0% (1)" in response.text
    assert failures.status_code == 200
    assert 'href="/jobs/render/42?attempt=1"' in failures.text
    assert client.get("/steps/failures").status_code == 400


def test_token_is_required_when_set(dsn: str, two_attempts: str) -> None:
    with TestClient(create_app(dsn, token=SECRET), follow_redirects=False) as client:
        assert client.get("/").status_code == 401
        assert client.get("/api/jobs").json() == {"error": "authentication required"}
        assert client.get("/api/jobs", headers={"authorization": "Bearer nope"}).status_code == 401
        bearer = client.get("/api/jobs", headers={"authorization": f"Bearer {SECRET}"})
        assert bearer.status_code == 200

        visit = client.get(f"/jobs/render/42?attempt=1&token={SECRET}")
        assert visit.status_code == 303
        assert visit.headers["location"] == "/jobs/render/42?attempt=1"
        cookie = visit.headers["set-cookie"]
        assert "httponly" in cookie.lower()
        assert "samesite=strict" in cookie.lower()
        assert client.get("/jobs/render/42?attempt=1").status_code == 200  # cookie kept
        # the redirect keeps the path as sent: %2F stays inside its segment
        assert client.get(f"/jobs/a%2Fb/7?token={SECRET}").headers["location"] == "/jobs/a%2Fb/7"
        assert SECRET not in client.get("/").text


@pytest.mark.parametrize(
    ("host", "status"),
    [
        pytest.param("127.0.0.1:8080", 200, id="ip"),
        pytest.param("localhost:8080", 200, id="localhost"),
        pytest.param("[::1]:8080", 200, id="ipv6"),
        pytest.param("LOCALHOST", 200, id="no-port"),
        pytest.param("rebind.example:8080", 421, id="rebinding"),
        pytest.param("127.0.0.1.rebind.example", 421, id="prefix"),
    ],
)
def test_loopback_server_answers_loopback_host_names_only(dsn: str, host: str, status: int) -> None:
    app = create_app(dsn, hosts=loopback_hosts("127.0.0.1"))
    with TestClient(app, base_url="http://127.0.0.1:8080") as client:
        assert client.get("/api/jobs", headers={"host": host}).status_code == status


@pytest.mark.parametrize(
    ("host", "token", "no_auth", "allowed"),
    [
        pytest.param("127.0.0.1", None, False, True, id="loopback"),
        pytest.param("::1", None, False, True, id="loopback-v6"),
        pytest.param("localhost", None, False, True, id="localhost"),
        pytest.param("0.0.0.0", None, False, False, id="any-without-token"),
        pytest.param("192.168.1.5", None, False, False, id="lan-without-token"),
        pytest.param("0.0.0.0", "t0k-long-enough-16", False, True, id="any-with-token"),
        pytest.param("0.0.0.0", None, True, True, id="any-no-auth"),
        pytest.param("0.0.0.0", "t0k-long-enough-16", True, False, id="token-and-no-auth"),
        pytest.param("127.0.0.1", " ", False, False, id="blank-token"),
        pytest.param("0.0.0.0", "t0k", False, False, id="short-token"),
    ],
)
def test_exposure_rules(host: str, token: str | None, no_auth: bool, allowed: bool) -> None:
    if allowed:
        check_exposure(host, token, no_auth)
    else:
        with pytest.raises(ConfigurationError):
            check_exposure(host, token, no_auth)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        pytest.param("127.0.0.1:8080", ("127.0.0.1", 8080), id="ipv4"),
        pytest.param("[::1]:9000", ("::1", 9000), id="ipv6"),
        pytest.param("localhost:1", ("localhost", 1), id="name"),
        pytest.param(":8080", None, id="no-host"),
        pytest.param("127.0.0.1", None, id="no-port"),
        pytest.param("127.0.0.1:65536", None, id="port-range"),
        pytest.param("127.0.0.1:http", None, id="port-name"),
    ],
)
def test_listen_address(text: str, parsed: tuple[str, int] | None) -> None:
    if parsed is None:
        with pytest.raises(ConfigurationError):
            parse_listen(text)
    else:
        assert parse_listen(text) == parsed


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        pytest.param(["--listen", "0.0.0.0:8080"], "--token", id="exposed"),
        pytest.param(["--listen", "nohost"], "HOST:PORT", id="listen"),
        pytest.param(["--trace-url", "javascript:alert(1)//{trace_id}"], "http", id="scheme"),
        pytest.param(["--trace-url", "https://tempo.example/trace"], "{trace_id}", id="no-id"),
    ],
)
def test_serve_refuses_bad_options_in_one_line(
    capsys: pytest.CaptureFixture[str], arguments: list[str], said: str
) -> None:
    dsn = f"postgresql://reader:{SECRET}@127.0.0.1:1/jobs"
    assert main(["serve", "--dsn", dsn, *arguments]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert said in err
    assert SECRET not in err


def test_works_with_a_select_only_role(dsn: str, two_attempts: str) -> None:
    role = "web_reader_" + re.sub(r"\W", "", dsn.rsplit("_", 1)[-1])[:12]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(
                sql.Identifier(role)
            )
        )
    try:
        reader_dsn = make_conninfo(dsn, user=role)
        with TestClient(create_app(reader_dsn)) as client:
            for path in ("/", job_url("render", two_attempts), "/running", "/steps", "/api/jobs"):
                assert client.get(path).status_code == 200, path
            assert (
                client.get("/api" + job_url("render", two_attempts)).json()["current_attempt"] == 2
            )
        with Reader(reader_dsn).snapshot() as conn:  # every read runs READ ONLY
            assert conn.execute("SHOW transaction_read_only").fetchone() == ("on",)
            with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
                conn.execute("DELETE FROM job_log")
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_database_down_gives_503_and_recovers(dsn: str, two_attempts: str) -> None:
    with FaultProxy(Upstream.from_dsn(dsn)) as proxy:
        app = create_app(proxy.dsn_for(dsn, password=SECRET))
        with TestClient(app) as client:
            assert client.get("/").status_code == 200
            proxy.set_mode(Mode.REFUSE)
            page = client.get(job_url("render", two_attempts))
            api = client.get("/api/jobs")
            proxy.set_mode(Mode.PASS)
            back = client.get(job_url("render", two_attempts))

    assert page.status_code == 503
    assert "Database unavailable" in page.text
    assert "data-refresh-ms" in page.text  # the error page retries by itself
    assert api.status_code == 503
    assert "database unreachable" in api.json()["error"]
    assert SECRET not in page.text + api.text
    assert back.status_code == 200


def test_schema_without_tables_gives_503(empty_dsn: str) -> None:
    with TestClient(create_app(empty_dsn)) as client:
        response = client.get("/api/jobs")

    assert response.status_code == 503
    assert "otel-jobsteps migrate" in response.json()["error"]


def test_json_of_a_hostile_job_is_plain_json(client: TestClient, hostile: str) -> None:
    response = client.get("/api" + job_url("evil", hostile))
    body: dict[str, Any] = response.json()

    assert response.headers["content-type"] == "application/json"
    assert body["steps"][0]["key"] == HOSTILE
    assert json.loads(response.text)["job_id"] == hostile


def _insert_jobs(conn: psycopg.Connection[Any], how_many: int, prefix: str, age: str) -> None:
    """``how_many`` completed jobs of one step each, the newest ``age`` ago, a second apart."""
    conn.execute(
        "INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status,"
        " created_at, ended_at)"
        " SELECT 'render', %(prefix)s || n, 'thumbnail', 1, 'STEP', 'RENDER', 'COMPLETED',"
        "  now() - %(age)s::interval - n * interval '1 s' - interval '100 ms',"
        "  now() - %(age)s::interval - n * interval '1 s' - interval '50 ms'"
        " FROM generate_series(1, %(n)s) AS n",
        {"prefix": prefix, "age": age, "n": how_many},
    )
    conn.execute(
        "INSERT INTO job_log (domain, job_id, job_type, attempt, status, created_at)"
        " SELECT 'render', %(prefix)s || n, 'thumbnail', 1, 'COMPLETED',"
        "  now() - %(age)s::interval - n * interval '1 s'"
        " FROM generate_series(1, %(n)s) AS n",
        {"prefix": prefix, "age": age, "n": how_many},
    )


def _insert_failed_job(conn: psycopg.Connection[Any], age: str) -> None:
    """Job render / broken, failed ``age`` ago (a final row only)."""
    conn.execute(
        "INSERT INTO job_log (domain, job_id, job_type, attempt, status, reason, created_at)"
        " VALUES ('render', 'broken', 'thumbnail', 1, 'FAILED', 'error',"
        "  now() - %s::interval)",
        (age,),
    )


def test_api_jobs_reads_the_last_24_hours_by_default(
    client: TestClient, conn: psycopg.Connection[Any]
) -> None:
    _insert_jobs(conn, 1, "recent-", "1 minute")
    _insert_jobs(conn, 1, "old-", "2 days")

    def listed(url: str) -> list[str]:
        response = client.get(url)
        assert response.status_code == 200
        return [job["job_id"] for job in response.json()]

    assert listed("/api/jobs") == ["recent-1"]
    assert listed("/api/jobs?window=all") == ["recent-1", "old-1"]
    assert listed("/api/jobs?window=7d&status=completed") == ["recent-1", "old-1"]


def test_a_filter_walks_past_the_newest_changes(
    client: TestClient, conn: psycopg.Connection[Any]
) -> None:
    """600 recent completed jobs and one failed job 5 minutes older than the oldest of them:
    the first read of the page (8 x 50 rows of each index) does not reach it."""
    _insert_jobs(conn, 600, "done-", "1 minute")
    _insert_failed_job(conn, "16 minutes")  # the oldest completed one ended 11 minutes ago

    page = client.get("/?status=failed")
    api = client.get("/api/jobs?status=failed").json()

    assert page.status_code == 200
    assert "No job matches" not in page.text
    assert 'href="/jobs/render/broken"' in page.text
    assert [job["job_id"] for job in api] == ["broken"]


def test_a_filter_that_stops_early_says_so(
    client: TestClient, conn: psycopg.Connection[Any]
) -> None:
    """Beyond the page's budget of rows, it says how far it looked and links further back,
    where the job is."""
    _insert_jobs(conn, 1700, "done-", "1 minute")
    _insert_failed_job(conn, "3 hours")

    page = client.get("/?status=failed")
    older = Markup(page.text).all("a", **{"class": "older"})
    further = client.get((older[0]["href"] or "").replace("&amp;", "&"))

    assert page.status_code == 200
    assert "No job matches among the changes read, back to" in page.text
    assert len(older) == 1
    assert "status=failed" in (older[0]["href"] or "")
    assert 'href="/jobs/render/broken"' in further.text


@pytest.mark.parametrize(
    "url",
    [
        "/?q=%00",
        "/?domain=%00",
        "/?type=a%00b",
        "/?before=2026-01-01T00:00:00%2B00:00&before_domain=%00&before_job=x",
        "/jobs/%00/x",
        "/jobs/render/x%00",
        "/job?domain=render&job_id=%00",
        "/steps/failures?key=%00",
        "/steps/failures?key=SAVE&type=%00",
        "/api/jobs?domain=%00",
        "/api/jobs?type=%00",
        "/api/jobs/render/%00",
        "/api/job?domain=a&job_id=%00",
        "/?%00=1",
        "/?limit=%C2%B2",
        "/?limit=1%00",
        pytest.param("/?limit=" + "9" * 5000, id="limit-5000-digits"),
        "/?limit=+5",
        "/api/jobs?limit=%D9%A3",
        "/jobs/render/42?attempt=%C2%B2",
        pytest.param("/jobs/render/42?attempt=" + "1" * 5000, id="attempt-5000-digits"),
        "/jobs/render/42?attempt=2147483648",
        "/api/job?domain=render&job_id=42&attempt=0",
    ],
)
def test_bad_parameters_are_400(
    client: TestClient, two_attempts: str, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    response = client.get(url)

    assert response.status_code == 400, response.text
    message = response.json()["error"] if "/api/" in url else response.text
    assert "NUL" in message or "must be an integer from 1 to" in message
    assert not [r for r in caplog.records if r.exc_info]


def test_failure_links_of_every_step_keep_a_window(client: TestClient, two_attempts: str) -> None:
    page = client.get("/steps?window=all")

    assert "/steps/failures?type=thumbnail&amp;key=SAVE&amp;window=30d" in page.text
    assert "window=all" not in page.text.split("<table", 1)[1]
