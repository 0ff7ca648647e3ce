"""``otel-jobsteps collect``'s bad input: one line on stderr, exit code 2, nothing started."""

from __future__ import annotations

import pytest

from tests.ingest.collector import run_collect


@pytest.mark.parametrize(
    ("options", "says"),
    [
        pytest.param(["--mapping", "id=a,colour=b"], "invalid mapping part", id="mapping"),
        pytest.param(["--listen", "nowhere"], "--listen must be HOST:PORT", id="listen"),
        pytest.param(["--grpc-listen", "on"], "--grpc-listen must be HOST:PORT", id="grpc-listen"),
        pytest.param(["--body-timeout", "0s"], "invalid duration", id="body-timeout"),
        pytest.param(
            ["--listen", "127.0.0.1:4398", "--grpc-listen", "0.0.0.0:4398"],
            "--grpc-listen and --listen need two ports",
            id="one-port",
        ),
        pytest.param(["--workers", "0"], "--workers", id="workers"),
        pytest.param(["--settle-after", "soon"], "invalid duration", id="settle-after"),
        pytest.param(
            ["--settle-after", "2h", "--settle-open-after", "1h"],
            "--settle-open-after must be at least --settle-after",
            id="settle-open-after",
        ),
        pytest.param(["--max-body-bytes", "12"], "--max-body-bytes", id="body-limit"),
        pytest.param(
            ["--listen", "127.0.0.1:4396", "--grpc-listen", "off", "--logs-min-severity", "LOUD"],
            "a log severity must be a name",
            id="logs-min-severity",
        ),
        pytest.param(["--logs-max-per-step", "0"], "--logs-max-per-step", id="logs-cap"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(empty_dsn: str, options: list[str], says: str) -> None:
    done = run_collect(empty_dsn, *options)
    assert done.returncode == 2
    assert says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_an_unmigrated_database_is_refused_in_one_line(empty_dsn: str) -> None:
    done = run_collect(empty_dsn, "--listen", "127.0.0.1:4397")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "otel-jobsteps: error: schema 'public' lacks the otel_jobsteps tables or the OTLP"
        " staging tables: run `otel-jobsteps migrate`"
    ]
