"""Each Python example, run as its header says, with real brokers and workers.

The header's first indented block is the commands: ``export`` lines set the environment (the
DSN is the test database's), ``pip install`` lines are skipped (the dev extra has them), a line
marked ``# terminal 1`` starts in the background (the worker), every other line runs to its
end. The indented block after the paragraph saying what it "prints:" must appear in the last
command's output, line by line in order (``...`` skips, ``<job id>`` is the job's id); the job's
step rows must then be the story every example tells: SAVE fails on attempt 1, attempt 2
completes. The Node.js example runs in tests/ingest/test_node_bullmq.py.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis import Redis

from tests.queues.support import (
    AMQP_URL,
    REDIS_URL,
    REPO,
    WorkerProcess,
    broker,
    log_rows,
    step_rows,
)

EXAMPLES = REPO / "examples"
JOB_ID = "<job id>"
SKIPPED = "..."
RUN_TIMEOUT_S = 120.0
STORY = [
    (1, "RENDER", "COMPLETED"),
    (1, "SAVE", "FAILED"),
    (2, "RENDER", "COMPLETED"),
    (2, "SAVE", "COMPLETED"),
]


@dataclass(frozen=True)
class Header:
    commands: list[str]
    prints: list[str]


def _indented_blocks(doc: str) -> list[tuple[str, list[str]]]:
    """(the line before it, its lines) of each block indented by four spaces."""
    blocks: list[tuple[str, list[str]]] = []
    before = ""
    current: list[str] | None = None
    for line in doc.splitlines():
        if line.startswith("    "):
            if current is None:
                current = []
                blocks.append((before, current))
            current.append(line[4:])
        else:
            current = None
            if line.strip():
                before = line.strip()
    return blocks


def read_header(path: Path) -> Header:
    doc = ast.get_docstring(ast.parse(path.read_text("utf-8")), clean=False) or ""
    blocks = _indented_blocks(doc)
    assert blocks, f"{path.name}: its header shows no commands"
    joined: list[str] = []
    pending = ""
    for line in blocks[0][1]:  # a line ending in a backslash continues on the next
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
        else:
            joined.append(pending + line)
            pending = ""
    prints = [lines for before, lines in blocks if before.endswith(":") and "prints" in before]
    assert prints, f"{path.name}: its header does not say what it prints"
    return Header(joined, prints[-1])


def _expect(output: str, expected: list[str]) -> str:
    """Match the expected lines in order; returns the job id they show."""
    job_id = ""
    remaining = iter(output.splitlines())
    for wanted in (w.strip() for w in expected):
        if wanted == SKIPPED:
            continue
        pattern = re.escape(wanted).replace(re.escape(JOB_ID), r"(?P<job>[\w.-]+)")
        for line in remaining:
            if found := re.fullmatch(pattern, line.strip()):
                job_id = found.groupdict().get("job") or job_id
                break
        else:
            raise AssertionError(f"the output lacks {wanted!r} (in order):\n{output}")
    assert job_id, "the printed lines show no job id"
    return job_id


EXAMPLE_SERVICES = {
    "celery_app.py": ("render", "celery"),
    "zero_code_celery.py": ("render", "celery"),
    "rq_app.py": ("render", "rq"),
    "arq_app.py": ("render", "arq"),
    "bullmq_app.py": ("render", "bullmq"),
    "render_save.py": ("media", None),
}


def test_every_python_example_is_run_here() -> None:
    assert sorted(EXAMPLE_SERVICES) == sorted(p.name for p in EXAMPLES.glob("*.py"))


def _service_environment(library: str | None) -> dict[str, str]:
    """The broker the example's library needs (skipped, or failed in CI, if none answers)."""
    if library is None:
        return {}
    pytest.importorskip(library)
    if library == "celery":
        hello = b"AMQP\x00\x00\x09\x01"
        url = broker(AMQP_URL, "RabbitMQ", default_port=5672, hello=hello, expect=b"\x01")
        return {"CELERY_BROKER_URL": url}
    url = broker(REDIS_URL, "Redis", default_port=6379, hello=b"PING\r\n", expect=b"+PONG")
    return {"REDIS_URL": url}


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop(grace_s=15)


def _forget_redis_keys(job_id: str) -> None:
    with Redis.from_url(REDIS_URL) as client:
        keys = list(client.scan_iter(match=f"*{job_id}*", count=1000))
        if keys:
            client.delete(*keys)


@pytest.mark.parametrize("name", sorted(EXAMPLE_SERVICES))
def test_the_example_runs_as_its_header_says(
    name: str, dsn: str, workers: list[WorkerProcess], tmp_path: Path
) -> None:
    domain, library = EXAMPLE_SERVICES[name]
    header = read_header(EXAMPLES / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CELERY_", "REDIS_"))}
    env.update(_service_environment(library))
    # The test database, also for the example that would start an embedded server without it.
    env["OTEL_JOBSTEPS_DSN"] = dsn
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    output = ""
    for index, command in enumerate(header.commands):
        line, _, comment = command.partition("#")
        line = line.strip()
        if line.startswith("pip install"):
            continue
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = dsn if key == "OTEL_JOBSTEPS_DSN" else value
            continue
        if "terminal 1" in comment:
            log = tmp_path / f"command-{index}.log"
            workers.append(WorkerProcess(["bash", "-c", line], env, log))
            continue
        result = subprocess.run(
            ["bash", "-c", line],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        logs = "\n".join(w.log() for w in workers)
        assert result.returncode == 0, f"{line}\n{result.stdout}{result.stderr}\n{logs}"
        output = result.stdout

    job_id = _expect(output, header.prints)
    if library not in (None, "celery"):
        _forget_redis_keys(job_id)
    assert [row[:3] for row in step_rows(dsn, domain, job_id)] == STORY
    assert [row[:2] for row in log_rows(dsn, domain, job_id)] == [(1, "FAILED"), (2, "COMPLETED")]
