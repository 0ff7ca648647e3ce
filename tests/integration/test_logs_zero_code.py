"""Zero code: under ``opentelemetry-instrument`` the processor joins the SDK's LoggerProvider
beside the exporter configured there, so `logging` lines in a step become LOG rows.

The SDK's handler on the root logger sends every record of the process, otel_jobsteps' own
included, in the job's context: ours never become a job's lines, spans exported by OTLP to
``collect`` are recorded there (no warning says otherwise), and a warning that is true still
reaches stderr although the only handler exports it.
"""

from __future__ import annotations

import subprocess
import textwrap
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.helpers import rows, run_instrumented, wait_until
from tests.ingest.collector import CollectorFactory

pytest.importorskip("opentelemetry.distro", reason="needs opentelemetry-distro (instrument extra)")

SCRIPT = """
import logging
from otel_jobsteps import job_attempt, step

with job_attempt("render", "{job_id}", "thumbnail"):
    with step("RENDER"):
        logging.getLogger("app").warning("rendering %d frames", 24)
        logging.getLogger("otel_jobsteps.anything").warning("a line of ours")
    logging.getLogger("app").error("between steps")
"""
NO_STEPS = "no job steps are recorded"


def _run_instrumented(tmp_path: Path, job_id: str, **otel: str) -> subprocess.CompletedProcess[str]:
    """The script under ``opentelemetry-instrument`` with ``logging`` exported and ``otel``."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(SCRIPT.format(job_id=job_id)))
    return run_instrumented(
        script,
        OTEL_SERVICE_NAME="zero-code-logs",
        OTEL_METRICS_EXPORTER="none",
        OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED="true",
        **otel,
    )


def _log_rows(conn: psycopg.Connection[Any], job_id: str) -> list[tuple[Any, ...]]:
    return rows(
        conn,
        "SELECT step_key, message, detail->>'severity' FROM job_event"
        " WHERE job_id = %s AND type = 'LOG' ORDER BY created_at, id",
        job_id,
    )


LINES = [("RENDER", "rendering 24 frames", "WARN"), (None, "between steps", "ERROR")]


def test_zero_code_logging_lines_become_log_rows_and_the_users_exporter_still_gets_them(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    job_id = uuid.uuid4().hex[:8]

    done = _run_instrumented(
        tmp_path,
        job_id,
        OTEL_JOBSTEPS_DSN=dsn,
        OTEL_TRACES_EXPORTER="none",
        OTEL_LOGS_EXPORTER="console",
    )

    assert "rendering 24 frames" in done.stdout  # the console exporter kept its records
    assert "a line of ours" in done.stdout
    assert _log_rows(conn, job_id) == LINES


def test_zero_code_export_to_collect_keeps_our_records_out_and_warns_nothing(
    dsn: str, conn: psycopg.Connection[Any], start_collect: CollectorFactory, tmp_path: Path
) -> None:
    collector = start_collect(dsn)
    job_id = uuid.uuid4().hex[:8]

    done = _run_instrumented(
        tmp_path,
        job_id,
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_LOGS_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
    )

    assert NO_STEPS not in done.stderr
    wait_until(
        lambda: rows(conn, "SELECT 1 FROM job_log WHERE job_id = %s", job_id),
        what="collect to settle the attempt",
    )
    assert _log_rows(conn, job_id) == LINES
    steps = rows(conn, "SELECT step_key FROM job_event WHERE job_id = %s AND type = 'STEP'", job_id)
    assert steps == [("RENDER",)]


def test_a_true_setup_warning_reaches_stderr_when_logging_is_exported(tmp_path: Path) -> None:
    done = _run_instrumented(
        tmp_path, uuid.uuid4().hex[:8], OTEL_TRACES_EXPORTER="console", OTEL_LOGS_EXPORTER="none"
    )

    warnings = [line for line in done.stderr.splitlines() if NO_STEPS in line]
    assert len(warnings) == 1, done.stderr
    assert "has no JobStepsProcessor" in warnings[0]
