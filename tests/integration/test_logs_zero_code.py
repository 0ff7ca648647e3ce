"""Zero code: under ``opentelemetry-instrument`` the processor joins the SDK's LoggerProvider
beside the exporter configured there, so `logging` lines in a step become LOG rows."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.helpers import rows

pytest.importorskip("opentelemetry.distro", reason="needs opentelemetry-distro (instrument extra)")

INSTRUMENT = Path(sys.executable).parent / "opentelemetry-instrument"
SCRIPT = """
import logging
from otel_jobsteps import job_attempt, step

with job_attempt("render", "{job_id}", "thumbnail"):
    with step("RENDER"):
        logging.getLogger("app").warning("rendering %d frames", 24)
    logging.getLogger("app").error("between steps")
"""


def test_zero_code_logging_lines_become_log_rows_and_the_users_exporter_still_gets_them(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    job_id = uuid.uuid4().hex[:8]
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(SCRIPT.format(job_id=job_id)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONWARN"))}
    env.update(
        OTEL_JOBSTEPS_DSN=dsn,
        OTEL_SERVICE_NAME="zero-code-logs",
        OTEL_TRACES_EXPORTER="none",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="console",
        OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED="true",
    )
    done = subprocess.run(
        [str(INSTRUMENT), sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "rendering 24 frames" in done.stdout  # the console exporter kept its records
    found = rows(
        conn,
        "SELECT step_key, message, detail->>'severity' FROM job_event"
        " WHERE job_id = %s AND type = 'LOG' ORDER BY created_at, id",
        job_id,
    )
    assert found == [("RENDER", "rendering 24 frames", "WARN"), (None, "between steps", "ERROR")]
