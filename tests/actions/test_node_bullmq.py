"""The retry action through BullMQ's Python client on a queue the Node example's worker works
(its rows come through ``collect``): the Node worker runs attempt 2 to completion."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("bullmq", reason="needs the bullmq extra")

from otel_jobsteps.actions import load_actions, run_action
from tests.actions.support import action_rows, actions_file
from tests.ingest import test_node_bullmq as node
from tests.ingest.collector import CollectorFactory
from tests.queues.support import REDIS_URL, log_rows, wait_for_log

# The Node example's fixtures, by name: its npm packages, a queue of its own, its worker.
node_example, queue, node_worker = node.node_example, node.queue, node.node_worker


def test_a_job_the_node_worker_failed_is_retried_and_completes_there(
    start_collect: CollectorFactory,
    node_worker: node.NodeWorker,
    queue: str,
    dsn: str,
    tmp_path: Path,
) -> None:
    node_worker(start_collect(dsn))
    node.enqueue(queue, "flaky", "flaky-node", attempts=1)  # one attempt: fails for good
    wait_for_log(dsn, queue, "flaky-node", 1)
    path = actions_file(tmp_path, queue, "bullmq", url=REDIS_URL, queue_name=queue)

    result = run_action(dsn, load_actions(path), "retry", queue, "flaky-node", actor="test")

    assert (result.outcome, result.answer) == ("done", "moved from failed to wait")
    wait_for_log(dsn, queue, "flaky-node", 2)
    assert log_rows(dsn, queue, "flaky-node") == [(1, "FAILED", "error"), (2, "COMPLETED", None)]
    [(attempt, detail, _)] = action_rows(dsn, queue, "flaky-node")
    assert (attempt, detail["next_attempt"]) == (1, 2)
