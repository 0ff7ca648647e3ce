"""`otel-jobsteps serve` as a user runs it: a real process, a real port, the password hidden."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from psycopg.conninfo import make_conninfo

from tests.helpers import free_port, wait_until

SECRET = "pa55-not-for-eyes"


@pytest.fixture
def served(dsn: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "otel_jobsteps.cli",
            "serve",
            "--dsn",
            make_conninfo(dsn, password=SECRET),  # trust auth: accepted, never needed
            "--listen",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.terminate()
        process.wait(10)


def _get(url: str, host: str | None = None) -> tuple[int, str] | None:
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return None


def test_serve_answers_and_never_prints_the_password(
    served: tuple[str, subprocess.Popen[str]],
) -> None:
    base, process = served

    status, body = wait_until(lambda: _get(base + "/"), what="serve to answer")
    api = _get(base + "/api/jobs")
    rebound = _get(base + "/api/jobs", host="rebind.example")
    process.terminate()
    output, _ = process.communicate(timeout=10)

    assert status == 200
    assert "<h1>Jobs</h1>" in body
    assert api == (200, "[]")
    assert rebound is not None
    assert rebound[0] == 421  # a loopback server without a token answers loopback names only
    assert f"serving {base}/" in output
    assert "password=***" in output
    assert SECRET not in output
