"""Chromium clicks Retry on the job page of a job a real RQ worker failed, and sees attempt 2
run to completion and the ACTION row among the events.

Here, not in tests/actions: the session's browser keeps Playwright's event loop running in the
main thread, so it must come after every test that runs asyncio.run (tests/web is last)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

pytest.importorskip("rq", reason="needs the rq extra")

from rq import Queue

from otel_jobsteps.web import create_app
from otel_jobsteps.web.actions import Operator
from tests.actions import conftest as actions
from tests.actions.support import OPERATOR, READ
from tests.actions.test_web import failed_job
from tests.helpers import wait_until
from tests.queues.support import WorkerProcess
from tests.queues.test_rq import DOMAIN
from tests.web.support import live_server

if TYPE_CHECKING:
    from playwright.sync_api import Page

# The actions tests' fixtures, by name: a module's database, the RQ worker, the operator.
module_dsn, start_worker, run_id = actions.module_dsn, actions.start_worker, actions.run_id
redis_url, purge_redis, operator = actions.redis_url, actions.purge_redis, actions.operator
queue, redis, worker = actions.queue, actions.redis, actions.worker


def test_chromium_clicks_retry_and_sees_attempt_2_complete(
    worker: WorkerProcess, queue: Queue, module_dsn: str, operator: Operator, page: Page
) -> None:
    job_id = failed_job(queue, module_dsn)
    app = create_app(module_dsn, token=READ, operator=operator, refresh_s=0.3)
    with live_server(app) as url:
        page.goto(f"{url}/jobs/{DOMAIN}/{job_id}?token={OPERATOR}")  # the operator's session
        assert page.locator(".attempt").count() == 1

        page.get_by_role("button", name="Retry").click()
        page.wait_for_url(f"{url}/jobs/{DOMAIN}/{job_id}")

        def attempt_2_completed() -> bool:
            page.reload()
            head = page.locator('.attempt[data-attempt="2"] .attempt-head')
            return head.locator(".status.completed").count() == 1

        wait_until(attempt_2_completed, what="attempt 2 COMPLETED on the page", timeout_s=30)
        events = page.locator("table.events").inner_text()
        assert "retried by operator via page → attempt 2" in events
