"""The queue tests' real brokers and workers (one database and worker start per module), the
RQ tests' queue and forking worker (absent without the rq extra), and serve with an operator
for the RQ domain."""

import contextlib
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from otel_jobsteps.actions import load_actions
from otel_jobsteps.web import create_app
from otel_jobsteps.web.actions import Operator
from tests.actions.support import OPERATOR, READ, actions_file
from tests.queues import conftest as queues

# The queue tests' fixtures, by name (pytest finds fixtures among a conftest's attributes):
# brokers, workers and a module's database.
amqp_url, module_dsn, purge_redis = queues.amqp_url, queues.module_dsn, queues.purge_redis
redis_url, run_id, start_worker = queues.redis_url, queues.run_id, queues.start_worker

# Its importorskip: without rq, test_rq.py here skips the same way.
with contextlib.suppress(pytest.skip.Exception):
    from tests.queues.test_rq import queue, redis, worker  # noqa: F401 - fixtures


@pytest.fixture(scope="module")
def operator(tmp_path_factory: pytest.TempPathFactory, redis_url: str, module_dsn: str) -> Operator:
    """The operator role for the RQ tests' domain (``rq-test``)."""
    path = actions_file(tmp_path_factory.mktemp("actions"), "rq-test", "rq", url=redis_url)
    return Operator(OPERATOR, load_actions(path), module_dsn)


@pytest.fixture
def client(module_dsn: str, operator: Operator) -> Iterator[TestClient]:
    """serve with a read token and the operator role."""
    with TestClient(create_app(module_dsn, token=READ, operator=operator)) as test_client:
        yield test_client
