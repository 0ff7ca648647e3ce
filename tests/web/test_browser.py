"""The web page in a real headless Chromium (Playwright driving the OS browser) against a live
uvicorn server and a real PostgreSQL. Each test leaves a screenshot in the artifacts folder."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from opentelemetry.trace import set_span_in_context

from otel_jobsteps import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID, JOB_STEP_KEY, JOB_TYPE
from otel_jobsteps._cli.demo import record_seed_story
from otel_jobsteps.web import create_app
from otel_jobsteps.web.rendering import LONG_TOKEN, job_url
from tests.faults.proxy import FaultProxy, Mode, Upstream
from tests.helpers import TracingFactory
from tests.web.support import (
    ARTIFACTS,
    DOCS,
    FORTY_FAILS_AT,
    HOSTILE,
    ODD_JOBS,
    TRACE_URL,
    S,
    add_line,
    live_server,
    record_forty_steps,
    record_list_rows,
    record_timed_story,
    step_key,
    tagged_job,
)

if TYPE_CHECKING:
    from playwright.sync_api import Page

REFRESH_S = 0.3
WAIT_MS = 15_000


@pytest.fixture
def base_url(dsn: str) -> Iterator[str]:
    with live_server(create_app(dsn, trace_url=TRACE_URL, refresh_s=REFRESH_S)) as url:
        yield url


def bars(page: Page, attempt: int) -> list[dict[str, Any]]:
    """The step bars of one attempt's lane as drawn: key, status, duration and pixel box."""
    result: list[dict[str, Any]] = page.eval_on_selector_all(
        f'.attempt[data-attempt="{attempt}"] rect.bar',
        """els => els.map(el => {
            const box = el.getBoundingClientRect();
            return {key: el.dataset.key, status: el.dataset.status,
                    ms: parseFloat(el.dataset.durationMs), x: box.x, width: box.width};
        })""",
    )
    return result


def test_seed_story_attempts_as_swimlanes(
    page: Page, base_url: str, tracing: TracingFactory
) -> None:
    tracer, processor = tracing()
    record_timed_story(tracer)
    assert processor.force_flush(10_000)

    page.goto(base_url + job_url("render", "7"))

    assert page.locator(".attempt").count() == 2
    first, second = bars(page, 1), bars(page, 2)
    assert [(b["key"], b["status"]) for b in first] == [("RENDER", "COMPLETED"), ("SAVE", "FAILED")]
    assert [(b["key"], b["status"]) for b in second] == [
        ("RENDER", "COMPLETED"),
        ("SAVE", "COMPLETED"),
    ]
    failed = page.locator('.attempt[data-attempt="1"] rect.bar.failed')
    assert failed.evaluate("el => getComputedStyle(el).fill") != page.locator(
        '.attempt[data-attempt="1"] rect.bar.completed'
    ).evaluate("el => getComputedStyle(el).fill")
    # every row says its key, status and duration as text, not only on hover
    shown = rows(page, 1)
    assert [shown[0], shown[2]] == ["RENDER COMPLETED 2.50s", "SAVE FAILED 1.50s"]
    assert shown[1].startswith("STALLED worker lost its lock ")  # events in time order too
    assert shown[3].startswith("RETRY_SCHEDULED retry in 2s ")
    drawn = first + second
    # one shared axis: bars in time order, left to right across both lanes
    assert [b["x"] for b in drawn] == sorted(b["x"] for b in drawn)
    assert all(a["x"] + a["width"] <= b["x"] + 0.5 for a, b in itertools.pairwise(drawn))
    # widths in proportion to durations (2.5 s, 1.5 s, 2.5 s, 1 s)
    per_ms = [b["width"] / b["ms"] for b in drawn]
    assert max(per_ms) / min(per_ms) < 1.02
    head = page.locator('.attempt[data-attempt="1"] .attempt-head')
    assert head.locator(".error").inner_text() == "OSError: disk full"
    assert page.locator('.attempt[data-attempt="1"] rect.mark').count() == 2  # STALLED, RETRY
    assert page.locator("#job-state").inner_text() == "COMPLETED"
    select(page, 1, "SAVE")
    assert page.locator("#panel .message").inner_text() == "OSError: disk full"
    picture(page, "web-job.png")


def rows(page: Page, attempt: int) -> list[str]:
    """The visible text of one attempt's rows, whitespace folded."""
    texts = page.locator(f'.attempt[data-attempt="{attempt}"] .row').all_inner_texts()
    return [" ".join(text.split()) for text in texts]


def select(page: Page, attempt: int, key: str, *, keyboard: bool = False) -> None:
    """Choose a step row by a click or by Enter on its link; waits for its panel."""
    link = page.locator(f'.row[data-attempt="{attempt}"][data-step-key="{key}"] a')
    if keyboard:
        link.focus()
        page.keyboard.press("Enter")
    else:
        link.click()
    page.wait_for_function(
        """([attempt, key]) => {
            const row = document.querySelector('.row.chosen');
            return row !== null && row.dataset.attempt === attempt && row.dataset.stepKey === key
                && document.querySelector('#panel .key').textContent === key;
        }""",
        arg=[str(attempt), key],
        timeout=WAIT_MS,
    )


def picture(page: Page, name: str) -> None:
    """A screenshot for the docs: kept as an artifact, copied to docs/ when asked."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name))
    if os.environ.get("OTEL_JOBSTEPS_WRITE_DOCS") == "1":  # refresh the docs' pictures
        DOCS.mkdir(exist_ok=True)
        shutil.copyfile(ARTIFACTS / name, DOCS / name)


def test_running_bar_grows_and_the_page_settles_without_reload(
    page: Page, base_url: str, tracing: TracingFactory
) -> None:
    tracer, processor = tracing()
    attributes = {JOB_DOMAIN: "render", JOB_ID: "live", JOB_TYPE: "thumbnail", JOB_ATTEMPT: 1}
    start = time.time_ns() - 2 * S
    job = tracer.start_span("job", attributes=attributes, start_time=start)
    fetch = tracer.start_span(
        "fetch",
        context=set_span_in_context(job),
        attributes={JOB_STEP_KEY: "FETCH"},
        start_time=start,
    )
    fetch.end(end_time=start + S)
    render = tracer.start_span(
        "render", context=set_span_in_context(job), attributes={JOB_STEP_KEY: "RENDER"}
    )
    assert processor.force_flush(10_000)

    page.goto(base_url + job_url("render", "live"))
    page.evaluate("window.__sameDocument = true")
    assert page.locator("#job-state").inner_text() == "RUNNING"
    width = bars(page, 1)[1]["width"]
    page.wait_for_function(
        f"""() => document.querySelector('rect.bar.running').getBoundingClientRect().width
                  > {width} + 20""",
        timeout=WAIT_MS,
    )
    assert page.locator(".attempt-head .badge.silent").count() == 1

    render.end()
    job.end()
    assert processor.force_flush(10_000)
    page.wait_for_function(
        "() => document.getElementById('job-state').textContent === 'COMPLETED'", timeout=WAIT_MS
    )
    assert page.evaluate("window.__sameDocument") is True  # updated in place, never reloaded
    assert page.locator("rect.bar.running").count() == 0
    assert page.locator("#live[data-refresh-ms]").count() == 0  # settled: polling stopped


def test_error_page_recovers_in_place_when_the_database_returns(
    page: Page, dsn: str, two_attempts: str
) -> None:
    with FaultProxy(Upstream.from_dsn(dsn)) as proxy:
        app = create_app(proxy.dsn_for(dsn), refresh_s=REFRESH_S)
        with live_server(app) as base:
            proxy.set_mode(Mode.REFUSE)
            response = page.goto(base + job_url("render", two_attempts))
            assert response is not None
            assert response.status == 503
            assert page.locator("h1").inner_text() == "Database unavailable"
            page.evaluate("window.__sameDocument = true")

            proxy.set_mode(Mode.PASS)
            page.wait_for_function(
                "() => document.getElementById('job-state') !== null", timeout=WAIT_MS
            )
            assert page.evaluate("window.__sameDocument") is True
            assert page.locator("#job-state").inner_text() == "COMPLETED"
            assert page.title().startswith("render / 42")


def test_hostile_payloads_render_as_text_and_run_nothing(
    page: Page, base_url: str, hostile: str
) -> None:
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    for path in (job_url("evil", hostile), "/", "/steps"):
        page.goto(base_url + path)
        assert page.evaluate("typeof window.__pwned") == "undefined", path
        assert page.locator("img").count() == 0, path
        assert page.locator("main script").count() == 0, path
    page.goto(base_url + job_url("evil", hostile, 1, HOSTILE))
    assert page.locator("h1 .job-id").inner_text() == hostile
    assert page.locator(".row .key").first.inner_text() == HOSTILE
    assert page.locator("#panel .key").inner_text() == HOSTILE
    assert json.loads(page.locator("#panel code.detail").inner_text()) == {"note": HOSTILE}
    assert HOSTILE in page.locator("tr.event").first.inner_text()
    assert page.locator("rect.bar").first.get_attribute("data-key") == HOSTILE
    assert errors == []


def test_odd_ids_link_to_their_own_page_and_json(
    page: Page, base_url: str, tracing: TracingFactory
) -> None:
    tracer, processor = tracing()
    for domain, job_id in ODD_JOBS:
        record_seed_story(tracer, job_id, domain=domain, attempts=(2,))
    assert processor.force_flush(10_000)

    shown = []
    for index in range(len(ODD_JOBS)):
        page.goto(base_url + "/")
        page.locator("a.job-link").nth(index).click()
        page.wait_for_load_state()
        heading = (
            page.locator("h1 .domain").text_content(),
            page.locator("h1 .job-id").text_content(),
        )
        # the JSON link as Chromium resolves it (dot segments and all)
        api = page.evaluate("fetch(document.querySelector('p.raw a').href).then(r => r.json())")
        shown.append((api["domain"], api["job_id"]))
        # HTML text normalises CR/LF to LF
        assert heading == (api["domain"], api["job_id"].replace("\r\n", "\n"))
    assert sorted(shown) == sorted(ODD_JOBS)


def test_jobs_page_filters_and_pages(page: Page, base_url: str, tracing: TracingFactory) -> None:
    tracer, processor = tracing()
    for number in range(5):
        record_seed_story(
            tracer, f"job-{number}", domain="render", attempts=(2,) if number % 2 else (1,)
        )
    assert processor.force_flush(10_000)

    page.goto(base_url + "/")
    assert page.locator("tr.job").count() == 5
    page.get_by_label("Status").select_option("failed")
    page.get_by_role("button", name="Show").click()
    page.wait_for_url("**/?*status=failed*")
    shown = page.locator("a.job-link").all_inner_texts()
    assert sorted(shown) == ["job-0", "job-2", "job-4"]
    assert all(text == "FAILED" for text in page.locator("tr.job .status").all_inner_texts())

    page.goto(base_url + "/?limit=2")
    shown = [page.locator("a.job-link").all_inner_texts()]
    while page.locator("a.older").count():
        page.locator("a.older").click()
        page.wait_for_load_state()
        shown.append(page.locator("a.job-link").all_inner_texts())
    assert sorted(job for jobs in shown for job in jobs) == [f"job-{n}" for n in range(5)]
    back = []
    while page.locator("a.newer").count():  # and back, page by page
        page.locator("a.newer").click()
        page.wait_for_load_state()
        back.append(page.locator("a.job-link").all_inner_texts())
    assert back == shown[-2::-1]

    tagged_job(tracer, "acme-1", 1, customer="acme")
    tagged_job(tracer, "other-1", 1, customer="globex")
    assert processor.force_flush(10_000)
    page.goto(base_url + "/")
    page.get_by_label("Tag").fill("customer:acme")
    page.get_by_role("button", name="Show").click()
    page.wait_for_url("**tag=customer%3Aacme*")
    assert page.locator("a.job-link").all_inner_texts() == ["acme-1"]
    page.get_by_label("Tag").fill("")

    page.get_by_label("Job id").fill("job-")
    page.get_by_role("button", name="Show").click()
    page.wait_for_url("**q=job-*")
    assert sorted(page.locator("a.job-link").all_inner_texts()) == [f"job-{n}" for n in range(5)]
    page.get_by_label("Job id").fill("job-3")
    page.get_by_role("button", name="Show").click()
    page.wait_for_url("**q=job-3*")
    assert page.locator("a.job-link").all_inner_texts() == ["job-3"]
    page.locator("a.job-link").click()
    page.wait_for_url("**/jobs/render/job-3")
    assert page.locator(".attempt").count() == 1


def test_keyboard_reaches_every_link(page: Page, base_url: str, tracing: TracingFactory) -> None:
    tracer, processor = tracing()
    record_timed_story(tracer)
    assert processor.force_flush(10_000)
    page.goto(base_url + job_url("render", "7"))
    links = set(page.eval_on_selector_all("a[href]", "els => els.map(el => el.outerHTML)"))

    reached: set[str] = set()
    for _ in range(len(links) * 2 + 5):
        page.keyboard.press("Tab")
        focused = page.evaluate(
            "document.activeElement && document.activeElement.matches('a[href]')"
            " ? document.activeElement.outerHTML : null"
        )
        if focused:
            reached.add(focused)
    assert len(links) >= 8
    assert reached == links


def test_forty_steps_in_three_attempts_are_labelled_rows_in_time_order(
    page: Page, base_url: str, tracing: TracingFactory
) -> None:
    tracer, processor = tracing()
    record_forty_steps(tracer)
    assert processor.force_flush(10_000)

    page.goto(base_url + job_url("batch", "forty"))

    for attempt, last in ((1, 13), (2, 27), (3, 40)):
        keys = [step_key(n) for n in range(1, last + 1)]
        shown = page.locator(f'.attempt[data-attempt="{attempt}"] .row[data-step-key]')
        assert shown.evaluate_all("els => els.map(el => el.dataset.stepKey)") == keys
        texts = [text.split()[0] for text in shown.all_inner_texts()]
        assert texts == keys  # the key is the row's visible label
        drawn = bars(page, attempt)
        assert [b["x"] for b in drawn] == sorted(b["x"] for b in drawn)
        assert all(b["width"] >= 1 for b in drawn)
    for attempt, number in FORTY_FAILS_AT.items():
        row = page.locator(f'.row[data-attempt="{attempt}"][data-step-key="{step_key(number)}"]')
        assert row.locator(".status").inner_text() == "FAILED"

    page.evaluate("window.__sameDocument = true")
    select(page, 2, "S27")
    assert page.locator("#panel .message").inner_text() == "ValueError: boom 2"
    assert page.evaluate("window.__sameDocument") is True  # chosen in place
    assert page.url.endswith("?attempt=2&step=S27")
    select(page, 1, "S13", keyboard=True)
    assert page.locator("#panel .message").inner_text() == "ValueError: boom 1"
    assert page.evaluate("document.activeElement.closest('.row').dataset.stepKey") == "S13"

    page.reload()
    assert page.locator(".row.chosen").get_attribute("data-step-key") == "S13"
    assert page.locator("#panel .message").inner_text() == "ValueError: boom 1"
    page.go_back()
    page.wait_for_function(
        "() => document.querySelector('#panel .key')?.textContent === 'S27'", timeout=WAIT_MS
    )


def test_progress_of_a_running_step_is_a_bar_that_moves(
    page: Page, base_url: str, tracing: TracingFactory
) -> None:
    tracer, processor = tracing()
    attributes = {JOB_DOMAIN: "render", JOB_ID: "pct", JOB_TYPE: "video", JOB_ATTEMPT: 1}
    job = tracer.start_span("job", attributes=attributes)
    encode = tracer.start_span(
        "encode", context=set_span_in_context(job), attributes={JOB_STEP_KEY: "ENCODE"}
    )
    encode.add_event("progress", {"pct": 40, "fps": 29.97})
    assert processor.force_flush(10_000)

    page.goto(base_url + job_url("render", "pct", 1, "ENCODE"))
    for where in (".row .row-progress", "#panel .panel-progress"):
        bar = page.locator(where)
        assert bar.get_attribute("role") in (None, "progressbar")
        assert bar.evaluate("el => [el.value, el.max, el.matches(':indeterminate')]") == [
            40,
            100,
            False,
        ]
    assert page.get_by_role("progressbar").count() == 2
    encode.add_event("progress", {"pct": 70, "fps": 30.1})
    assert processor.force_flush(10_000)
    page.wait_for_function(
        "() => document.querySelector('.row .row-progress').value === 70"
        " && document.querySelector('#panel .panel-progress').value === 70",
        timeout=WAIT_MS,
    )
    encode.end()
    job.end()
    assert processor.force_flush(10_000)
    page.wait_for_function("() => !document.querySelector('.row .row-progress')", timeout=WAIT_MS)


# Every word of the lists' cells, with the lines each of its characters was drawn on (Range
# rects), the table's box and the page's width.
MEASURE_LIST = """() => {
  const words = [];
  const table = document.querySelector('table.list');
  const walker = document.createTreeWalker(table, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const found of node.data.matchAll(/\\S+/g)) {
      const range = document.createRange();
      range.setStart(node, found.index);
      range.setEnd(node, found.index + found[0].length);
      const lines = new Set([...range.getClientRects()].filter(r => r.width > 0)
                            .map(r => Math.round(r.top)));
      words.push([found[0], lines.size]);
    }
  }
  const box = table.getBoundingClientRect();
  return {words, left: box.left, right: box.right, width: window.innerWidth,
          pageWidth: document.documentElement.scrollWidth};
}"""
FAILURES = "/steps/failures?type=invoice.render&key=send.batch"
LIST_PAGES = ("/", "/running", "/steps?window=all", FAILURES)


@pytest.mark.parametrize("width", [390, 1280])
def test_lists_never_split_a_short_token_and_fit_the_screen(
    new_page: Callable[..., Page], base_url: str, conn: psycopg.Connection[Any], width: int
) -> None:
    """Issue 36 item 10: at 390 px the lists broke job ids, types and step keys letter by letter
    and at 1280 px "newsletter" broke as "newslette/r" (every cell could break anywhere). A word
    under LONG_TOKEN characters is now drawn on one line; the table stays within the screen."""
    record_list_rows(conn)
    phone = {"is_mobile": True, "has_touch": True, "device_scale_factor": 2} if width < 800 else {}
    page = new_page(viewport={"width": width, "height": 844}, **phone)
    for path in LIST_PAGES:
        page.goto(base_url + path)
        found = page.evaluate(MEASURE_LIST)
        assert len(found["words"]) >= 10, path  # the rows were drawn
        split = [word for word, lines in found["words"] if lines > 1 and len(word) < LONG_TOKEN]
        assert split == [], (width, path)
        assert found["left"] >= 0, (width, path)
        assert found["right"] <= found["width"], (width, path)
        assert found["pageWidth"] <= found["width"], (width, path)


def test_phone_and_dark_views(
    new_page: Callable[..., Page], base_url: str, tracing: TracingFactory
) -> None:
    tracer, processor = tracing()
    record_timed_story(tracer)
    assert processor.force_flush(10_000)
    url = base_url + job_url("render", "7", 1, "SAVE")

    phone = new_page(
        viewport={"width": 390, "height": 844},
        is_mobile=True,
        has_touch=True,
        device_scale_factor=2,
    )
    phone.goto(url)
    assert phone.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    for row in phone.locator(".row[data-step-key]").all():
        box = row.bounding_box()
        assert box is not None
        assert 0 < box["width"] <= 390 - box["x"]
        assert row.locator("rect.bar").bounding_box() is not None
    assert phone.locator(".row[data-step-key]").first.is_visible()
    labels = phone.locator(".ticks span:visible").evaluate_all(
        "els => els.map(el => el.getBoundingClientRect()).map(b => [b.left, b.right])"
    )
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(labels))  # axis labels apart
    picture(phone, "web-job-phone.png")

    light, dark = new_page(color_scheme="light"), new_page(color_scheme="dark")
    for shown in (light, dark):
        shown.goto(url)
    background = "getComputedStyle(document.body).backgroundColor"
    assert luminance(dark.evaluate(background)) < 0.1 < 0.8 < luminance(light.evaluate(background))
    text = "getComputedStyle(document.body).color"
    assert luminance(dark.evaluate(text)) > 0.6
    for shown in (light, dark):  # WCAG AA: 4.5:1 for text of this size
        for selector, (fg, bg) in colours(shown, CONTRASTED).items():
            assert contrast(fg, bg) >= 4.5, (selector, fg, bg)
    picture(dark, "web-job-dark.png")


def test_a_steps_log_lines_are_in_its_panel_collapsed_coloured_and_escaped(
    new_page: Callable[..., Page], base_url: str, tracing: TracingFactory, dsn: str
) -> None:
    tracer, processor = tracing()
    record_timed_story(tracer)
    assert processor.force_flush(10_000)
    severities = ["DEBUG", "INFO", "WARN", "ERROR"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for n, severity in enumerate(severities):
            at = f"created_at + interval '{n + 1} ms'"
            add_line(conn, "7", 1, "RENDER", f"{severity} line", severity=severity, at=at)
        add_line(conn, "7", 1, "RENDER", HOSTILE, severity="ERROR", at="created_at + '9 ms'")
        add_line(conn, "7", 1, None, "between the steps")

    for scheme in ("light", "dark"):
        page = new_page(color_scheme=scheme)
        page.goto(base_url + job_url("render", "7", 1))
        assert page.locator(".between-lines summary").inner_text() == (
            "Log lines between steps (1)"
        )
        select(page, 1, "RENDER")  # the panel is swapped in place, its lines with it
        summary = page.locator("#panel details.log-lines summary")
        assert summary.inner_text() == "Log lines of RENDER (5)"
        assert not page.locator("#panel .log-line").first.is_visible()  # collapsed
        summary.click()
        lines = page.locator("#panel .log-line")
        assert lines.first.is_visible()
        shown = lines.evaluate_all("els => els.map(el => el.querySelector('.message').textContent)")
        assert shown == [f"{s} line" for s in severities] + [HOSTILE]  # newest last, as text
        assert page.evaluate("window.__pwned") is None
        selectors = [f"#panel .severity.{s.lower()}" for s in severities]
        found = colours(page, selectors)
        for selector, (fg, bg) in found.items():
            assert contrast(fg, bg) >= 4.5, (scheme, selector, fg, bg)
        assert len({fg for fg, _ in found.values()}) == 4  # each severity its own colour


CONTRASTED = [
    "main",
    ".took",
    ".attempt-head .reason",
    ".attempt-head .error",
    ".status.failed",
    ".status.completed",
    ".attempt-link",
    ".event-type",
    ".event-message",
    ".row.step.failed .key",
    ".axis",
    "#panel dt",
]


def colours(page: Page, selectors: list[str]) -> dict[str, tuple[str, str]]:
    """Each selector's first element: its text colour and the first opaque background behind it."""
    found: dict[str, tuple[str, str]] = page.evaluate(
        """selectors => Object.fromEntries(selectors.map(selector => {
            const el = document.querySelector(selector);
            let ground = el, bg = "rgba(0, 0, 0, 0)";
            while (ground && (bg = getComputedStyle(ground).backgroundColor).startsWith("rgba")
                   && bg.endsWith(", 0)")) ground = ground.parentElement;
            return [selector, [getComputedStyle(el).color, bg]];
        }))""",
        selectors,
    )
    return found


def contrast(first: str, second: str) -> float:
    high, low = sorted((luminance(first), luminance(second)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def luminance(css_color: str) -> float:
    """Relative luminance (WCAG) of an ``rgb(r, g, b)`` colour."""
    red, green, blue = (int(part) / 255 for part in css_color[4:-1].split(",")[:3])

    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * linear(red) + 0.7152 * linear(green) + 0.0722 * linear(blue)
