"""Every reader of the recorded rows, run over one database: the CLI's ``jobs``, ``show`` and
``tail``, ``job_detail`` and every page and API route of ``serve``."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlencode

from starlette.testclient import TestClient

from otel_jobsteps import job_detail
from otel_jobsteps.web import create_app
from otel_jobsteps.web.rendering import job_url

TIMEOUT_S = 120


def _command() -> list[str]:
    beside = Path(sys.executable).parent / "otel-jobsteps"
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "otel_jobsteps.cli"]


def _environment(dsn: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_JOBSTEPS_")}
    return {**env, "OTEL_JOBSTEPS_DSN": dsn}


def cli(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_command(), *args],
        capture_output=True,
        text=True,
        env=_environment(dsn),
        timeout=TIMEOUT_S,
        check=False,
    )


def assert_every_read_answers(dsn: str, jobs: list[tuple[str, str]]) -> None:
    """Each reader answers (exit 0, HTTP 200) over the whole database and for each job."""
    commands = [("jobs",), ("jobs", "--json"), ("show", *jobs[0], "--json")]
    commands += [("show", domain, job_id) for domain, job_id in jobs]
    for args in commands:
        result = cli(dsn, *args)
        assert (result.returncode, result.stderr) == (0, ""), args
    for domain, job_id in jobs:
        assert job_detail(dsn, domain, job_id) is not None
    with TestClient(create_app(dsn)) as client:
        for path in _web_paths(jobs):
            response = client.get(path)
            assert response.status_code == 200, (path, response.text[:500])


def _web_paths(jobs: list[tuple[str, str]]) -> list[str]:
    paths = ["/", "/?window=24h", "/?status=failed", "/running", "/steps", "/steps?window=all"]
    paths += ["/api/jobs", "/api/jobs?window=all", "/api/running", "/api/steps?window=all"]
    for domain, job_id in jobs:
        key = urlencode({"domain": domain, "job_id": job_id})
        paths += [job_url(domain, job_id), f"/job?{key}", f"/api{job_url(domain, job_id)}"]
        paths += [f"/api/job?{key}", f"/steps/failures?{urlencode({'key': 'SAVE'})}&window=all"]
    return paths


def tail_while(dsn: str, write: Callable[[], None], lines: int) -> list[str]:
    """``otel-jobsteps tail`` started, ``write()`` done, then its next ``lines`` lines; it is
    stopped with Ctrl-C and must exit 0 without a traceback."""
    with subprocess.Popen(
        [*_command(), "tail", "--interval", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(dsn),
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        printed: queue.Queue[str] = queue.Queue()
        reader = threading.Thread(target=lambda: [printed.put(line) for line in proc.stdout])  # type: ignore[union-attr]
        reader.start()
        try:
            assert printed.get(timeout=30).startswith("following job_event")
            write()
            seen = [printed.get(timeout=30) for _ in range(lines)]
            proc.send_signal(signal.SIGINT)
            assert proc.wait(TIMEOUT_S) == 0
            assert "Traceback" not in proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
            reader.join(TIMEOUT_S)
    return seen
