"""Fixtures of the web tests: the seed story and a hostile job recorded through real spans, and
an HTTP client on the app."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

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


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A fresh browser page; its screenshot is saved as a test artifact afterwards."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    opened = context.new_page()
    opened.on("dialog", lambda dialog: pytest.fail(f"a dialog opened: {dialog.message}"))
    yield opened
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    opened.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=True)
    context.close()
