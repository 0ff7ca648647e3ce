"""The queue tests' real brokers and workers (one database and worker start per module), and
the RQ tests' queue and forking worker (absent without the rq extra)."""

import contextlib

import pytest

from tests.queues.conftest import (  # noqa: F401 - fixtures
    amqp_url,
    module_dsn,
    purge_redis,
    redis_url,
    run_id,
    start_worker,
)

# Its importorskip: without rq, test_rq.py here skips the same way.
with contextlib.suppress(pytest.skip.Exception):
    from tests.queues.test_rq import queue, redis, worker  # noqa: F401 - fixtures
