"""Bulk actions on 50 failed jobs of a real RQ worker: the dry run, the refusal above max, the
retry of all of them in batches (each runs attempt 2 to completion)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

pytest.importorskip("rq", reason="needs the rq extra")

from rq import Queue
from starlette.testclient import TestClient

from otel_jobsteps.web.actions import Operator
from tests.actions.support import AS_OPERATOR, action_rows, actions_file, cli
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
    ids = [f"bulk-{n:02d}-{uuid.uuid4().hex[:6]}" for n in range(COUNT)]
    for job_id in ids:
        queue.enqueue(f"{JOBS}.flaky", job_id=job_id)  # no retries: attempt 1 fails for good
    for job_id in ids:
        wait_for_log(module_dsn, DOMAIN, job_id, 1)
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
