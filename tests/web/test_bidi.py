"""Bidi controls in job strings (U+202E reverses what follows it) stay inside their own value on
every page: each element holding one is isolated, as a ``<bdi>`` is (real Chromium)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import pytest

from otel_jobsteps import job_attempt, progress, record_job_event, step
from otel_jobsteps.web import create_app
from otel_jobsteps.web.rendering import job_url
from tests.helpers import TracingFactory
from tests.web.support import live_server, tagged_job

if TYPE_CHECKING:
    from playwright.sync_api import Page

RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: "exe.gpj" after it reads "jpg.exe"
FLIPPED = f"x{RLO}exe.gpj"

# Every text node holding a bidi control whose element does not isolate it.
_UNISOLATED = r"""() => {
    const controls = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    const found = [];
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        const element = node.parentElement;
        if (!controls.test(node.data) || element.closest("script, template")) continue;
        const bidi = getComputedStyle(element).unicodeBidi;
        if (!["isolate", "isolate-override", "plaintext"].includes(bidi))
            found.push(element.tagName + "." + element.className + ": " + bidi);
    }
    return found;
}"""


@pytest.fixture
def base_url(dsn: str) -> Iterator[str]:
    with live_server(create_app(dsn)) as url:
        yield url


def test_every_value_with_a_bidi_control_is_isolated(
    page: Page, base_url: str, tracing: TracingFactory
) -> None:
    tracer, processor = tracing()
    try:
        with job_attempt("rtl", FLIPPED, FLIPPED, tracer=tracer):
            with step(FLIPPED, tracer=tracer):
                progress(note=FLIPPED)
                raise ValueError(FLIPPED)
    except ValueError:
        pass
    record_job_event("rtl", FLIPPED, "NOTE", FLIPPED, tracer=tracer)
    tagged_job(tracer, "tagged", 1, **{FLIPPED: FLIPPED})
    with job_attempt("rtl", "open", FLIPPED, tracer=tracer), step(FLIPPED, tracer=tracer):
        progress(note=FLIPPED)
        assert processor.force_flush(10_000)
        paths = [
            job_url("rtl", FLIPPED),
            job_url("rtl", FLIPPED, 1, FLIPPED),  # the step's panel
            job_url("shop", "tagged"),
            "/",
            "/?status=failed",
            "/running",
            "/steps",
            "/steps/failures?" + urlencode({"type": FLIPPED, "key": FLIPPED}),
        ]
        for path in paths:
            page.goto(base_url + path)
            assert RLO in page.content(), path  # the page shows the value, control and all
            assert page.evaluate(_UNISOLATED) == [], path
