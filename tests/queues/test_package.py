"""The integrations package itself imports no queue library."""

from __future__ import annotations

import subprocess
import sys

from tests.queues.support import REPO


def test_importing_the_package_needs_no_queue_library() -> None:
    # None in sys.modules makes any import of these names fail, as if none were installed.
    code = (
        "import sys\n"
        "for name in ('celery', 'kombu', 'billiard', 'rq', 'arq', 'bullmq', 'redis'):\n"
        "    sys.modules[name] = None\n"
        "import otel_jobsteps.integrations as integrations\n"
        "assert integrations.OUTCOME_RETRY == 'retry'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
