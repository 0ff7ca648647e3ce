"""Bulk actions on 50 failed jobs of a real RQ worker: the dry run, the refusal above max, the
retry of all of them in batches (each runs attempt 2 to completion)."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("rq", reason="needs the rq extra")

from rq import Queue
from starlette.testclient import TestClient

from otel_jobsteps.actions import ActionResult
from otel_jobsteps.actions.bulk import BATCH_SIZE, BulkPlan, parse_filter, plan_bulk, run_bulk
from otel_jobsteps.web import create_app
from otel_jobsteps.web.action_runs import ActionCounter, BulkRun
from otel_jobsteps.web.actions import Operator
from tests.actions.support import AS_OPERATOR, OPERATOR, READ, action_rows, actions_file, cli
from tests.helpers import wait_until
from tests.queues.support import WorkerProcess, log_rows, wait_for_log
from tests.queues.test_rq import DOMAIN, JOBS

COUNT = 50


def test_bulk_dry_run_then_retry_of_50_failed_jobs_within_max(
    worker: WorkerProcess,
    queue: Queue,
    module_dsn: str,
    client: TestClient,
    operator: Operator,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ids = failed_jobs(queue, module_dsn, "bulk-", COUNT)
    chosen = {"domain": DOMAIN, "status": "failed", "prefix": "bulk-"}

    dry = client.post(
        "/api/actions/retry", headers=AS_OPERATOR, json={**chosen, "dry_run": True, "max": COUNT}
    )
    over = client.post("/api/actions/retry", headers=AS_OPERATOR, json={**chosen, "max": COUNT - 1})
    unbounded = client.post("/api/actions/retry", headers=AS_OPERATOR, json=chosen)

    assert dry.status_code == 200
    assert (dry.json()["count"], dry.json()["over_max"]) == (COUNT, False)
    assert [job["job_id"] for job in dry.json()["first"]] == sorted(ids)[:20]
    assert (over.status_code, over.json()["error"]) == (
        409,
        "more than max (49) jobs match: narrow the filter",
    )
    assert unbounded.status_code == 400
    assert all(action_rows(module_dsn, DOMAIN, job_id) == [] for job_id in ids)

    path = actions_file(tmp_path, DOMAIN, "rq", url=operator.config.domain(DOMAIN).url)
    filters = [arg for key, value in chosen.items() for arg in ("--filter", f"{key}={value}")]
    assert cli(module_dsn, "retry", *filters, "--max", str(COUNT), "--actions", str(path)) == 0

    out, err = capsys.readouterr()
    assert out == f"retry: {COUNT} done, 0 refused, 0 not found\n"
    assert err.splitlines() == [f"retry: {n}/{COUNT}" for n in range(10, COUNT + 1, 10)]
    for job_id in ids:
        wait_for_log(module_dsn, DOMAIN, job_id, 2)
        assert log_rows(module_dsn, DOMAIN, job_id) == [
            (1, "FAILED", "error"),
            (2, "COMPLETED", None),
        ]
    assert (
        cli(module_dsn, "retry", *filters, "--max", "1", "--dry-run", "--actions", str(path)) == 0
    )
    assert capsys.readouterr().out == "0 jobs match (max 1)\n"


def failed_jobs(queue: Queue, dsn: str, prefix: str, count: int) -> list[str]:
    ids = [f"{prefix}{n:02d}-{uuid.uuid4().hex[:6]}" for n in range(count)]
    for job_id in ids:
        queue.enqueue(f"{JOBS}.flaky", job_id=job_id)  # no retries: attempt 1 fails for good
    for job_id in ids:
        wait_for_log(dsn, DOMAIN, job_id, 1)
    return ids


def test_a_bulk_stops_between_batches(
    worker: WorkerProcess, queue: Queue, module_dsn: str, operator: Operator
) -> None:
    failed_jobs(queue, module_dsn, "halt-", 25)
    chosen = parse_filter({"domain": DOMAIN, "prefix": "halt-"})
    plan = plan_bulk(module_dsn, chosen, 25)
    stop = threading.Event()

    results = run_bulk(
        module_dsn,
        operator.config,
        "cancel",
        plan,
        actor="t",
        progress=lambda _: stop.set(),
        stop=stop,
    )

    assert len(results) == BATCH_SIZE  # the first batch, then the stop
    assert {result.outcome for result in results} == {"refused"}  # RQ cancels no failed job


def test_api_bulk_runs_in_the_background_with_progress_and_a_stop(
    worker: WorkerProcess, queue: Queue, module_dsn: str, client: TestClient
) -> None:
    ids = failed_jobs(queue, module_dsn, "api-", 25)
    body = {"domain": DOMAIN, "status": "failed", "prefix": "api-", "max": 25}

    started = client.post("/api/actions/cancel", headers=AS_OPERATOR, json=body)
    stopped = client.post(f"{started.json()['url']}/stop", headers=AS_OPERATOR)

    assert (started.status_code, stopped.status_code) == (202, 202)
    assert started.json()["matched"] == 25

    def ended() -> dict[str, Any] | None:
        found: dict[str, Any] = client.get(started.json()["url"], headers=AS_OPERATOR).json()
        return found if found["state"] in ("stopped", "finished") else None

    final = wait_until(ended, what="the bulk action to end")
    # Stopped between batches (or done before the stop came): the plan's first whole batches,
    # in its order (the ids'), and only them.
    assert final["acted"] in (0, BATCH_SIZE, 2 * BATCH_SIZE, 25)
    acted_on = [job_id for job_id in sorted(ids) if action_rows(module_dsn, DOMAIN, job_id)]
    assert acted_on == sorted(ids)[: final["acted"]]
    assert final["refused"] == final["acted"]
    assert (final["state"] == "finished") == (final["acted"] == 25)


def test_a_bulk_that_fails_midway_counts_what_it_did(module_dsn: str, operator: Operator) -> None:
    """RQ knows none of these jobs (not_found, no row written): no worker needed."""
    gone = [f"gone-{n:02d}-{uuid.uuid4().hex[:6]}" for n in range(BATCH_SIZE + 1)]
    # The job after them is in a domain the actions file does not name: the run fails there.
    plan = BulkPlan((*((DOMAIN, job_id) for job_id in gone), ("elsewhere", "x")), BATCH_SIZE + 2)
    counter = ActionCounter()
    run = BulkRun("midway", "cancel", len(plan.jobs))

    def work(stop: threading.Event) -> list[ActionResult]:
        config = operator.config
        return run_bulk(module_dsn, config, "cancel", plan, actor="t", progress=run.advance)

    run.begin(work, counter)
    final = wait_until(
        lambda: (found := run.to_dict())["state"] == "failed" and found, what="the run to fail"
    )

    assert (final["acted"], final["not_found"]) == (BATCH_SIZE + 1, BATCH_SIZE + 1)
    [family] = counter.collect()
    counted = {(s.labels["action"], s.labels["outcome"]): s.value for s in family.samples}
    assert {labels for labels, value in counted.items() if value} == {("cancel", "not_found")}
    assert counted[("cancel", "not_found")] == BATCH_SIZE + 1  # the part done before the error


def test_a_bulk_whose_database_is_away_answers_503(module_dsn: str, operator: Operator) -> None:
    away = Operator(OPERATOR, operator.config, "postgresql://postgres@127.0.0.1:1/none")
    app = create_app(module_dsn, token=READ, operator=away)
    with TestClient(app) as client:
        answer = client.post(
            "/api/actions/retry", headers=AS_OPERATOR, json={"domain": DOMAIN, "max": 5}
        )
    assert answer.status_code == 503
    assert answer.json()["error"]  # the reason, one line
