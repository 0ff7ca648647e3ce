"""Fixtures of the web tests: the seed story and a hostile job recorded through real spans, and
an HTTP client on the app."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
from starlette.testclient import TestClient

from otel_jobsteps.web import create_app
from tests.helpers import TracingFactory

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page
from tests.web.support import (
    ARTIFACTS,
    BROWSER_ARGS,
    REQUIRE_BROWSER,
    TRACE_URL,
    chromium,
    record_hostile,
)


@pytest.fixture
def hostile(tracing: TracingFactory) -> str:
    return record_hostile(tracing)


@pytest.fixture
def client(dsn: str) -> Iterator[TestClient]:
    with TestClient(create_app(dsn, trace_url=TRACE_URL)) as test_client:
        yield test_client


# -- a live server and a real browser ---------------------------------------------------------


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """The OS Chromium driven by Playwright; skipped (failed under CI) when there is none."""
    executable = chromium()
    missing = pytest.fail if REQUIRE_BROWSER else pytest.skip
    if executable is None:
        missing(
            "no Chromium found: apt-get install chromium, or set OTEL_JOBSTEPS_CHROMIUM to its path"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("the playwright package is not installed (pip install -e '.[dev]')")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=BROWSER_ARGS)
        yield launched
        launched.close()


PageFactory = Callable[..., "Page"]


@pytest.fixture
def new_page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[PageFactory]:
    """Fresh browser pages with the given context options (desktop size unless told); each
    page's screenshot is saved as a test artifact afterwards."""
    opened: list[tuple[Any, Page]] = []

    def open_page(**options: Any) -> Page:
        context = browser.new_context(**{"viewport": {"width": 1280, "height": 800}, **options})
        made = context.new_page()
        made.on("dialog", lambda dialog: pytest.fail(f"a dialog opened: {dialog.message}"))
        opened.append((context, made))
        return made

    yield open_page
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for number, (context, made) in enumerate(opened):
        suffix = f"-{number}" if number else ""
        made.screenshot(path=str(ARTIFACTS / f"{request.node.name}{suffix}.png"), full_page=True)
        context.close()


@pytest.fixture
def page(new_page: PageFactory) -> Page:
    """A fresh desktop-sized browser page."""
    return new_page()
