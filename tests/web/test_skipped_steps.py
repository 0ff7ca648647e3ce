"""The job page shows a SKIPPED step (issue 37) with its own badge, bar and legend entry."""

from __future__ import annotations

import re

from starlette.testclient import TestClient

from otel_jobsteps import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID, JOB_STEP_KEY
from otel_jobsteps._core.dialects.cicd import STEP_SKIPPED
from otel_jobsteps.web.rendering import job_url
from tests.helpers import TracingFactory


def test_the_job_page_shows_a_skipped_step(client: TestClient, tracing: TracingFactory) -> None:
    tracer, processor = tracing()
    with tracer.start_as_current_span(
        "pipeline", attributes={JOB_DOMAIN: "ci", JOB_ID: "run-1", JOB_ATTEMPT: 1}
    ):
        with tracer.start_as_current_span("build", attributes={JOB_STEP_KEY: "BUILD"}):
            pass
        with tracer.start_as_current_span(
            "lint", attributes={JOB_STEP_KEY: "LINT", STEP_SKIPPED: True}
        ):
            pass
    assert processor.force_flush(10_000)
    page = client.get(job_url("ci", "run-1")).text
    row = re.search(r'<li class="row step skipped[^"]*" data-step-key="LINT".*?</li>', page, re.S)
    assert row is not None
    assert '<span class="status skipped">SKIPPED</span>' in row[0]
    assert 'class="bar skipped"' in row[0]
    assert '<rect class="skipped"' in page  # the legend's swatch
    css = client.get("/static/app.css").text
    assert ".status.skipped" in css
    assert ".bar.skipped" in css
