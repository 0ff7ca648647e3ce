"""serve and collect say what they do: a line at start, an opt-in access line per request, a
taken port in one line with exit 2, what a stop drained; the processor says what its shutdown
dropped and what a short force_flush left queued. Real processes, the fault proxy for the
database."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from psycopg.conninfo import make_conninfo
from starlette.responses import PlainTextResponse
from starlette.testclient import TestClient
from starlette.types import Receive, Scope, Send

from otel_jobsteps import JobStepsProcessor
from otel_jobsteps._http.requestlog import RequestLog
from tests.faults.proxy import FaultProxy, Mode, Upstream
from tests.helpers import free_port, wait_until
from tests.ingest.requests import PROTOBUF, proto_spans, request_of

SECRET = "pa55-for-nobody"
TOKEN = "the-page-token-long-enough"
SERVICES = ["serve", "collect"]
LAYOUT = "partitioned" if os.environ.get("OTEL_JOBSTEPS_TEST_LAYOUT") == "partitioned" else "plain"
JOB = {"job.domain": "ops", "job.id": "job-1", "job.type": "render", "job.attempt": 1}


class Service:
    """One ``otel-jobsteps serve`` or ``collect`` process, its output in a file."""

    def __init__(self, command: str, dsn: str, log: Path, *args: str) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log_path = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "otel_jobsteps.cli", command, "--dsn", dsn,
                 "--listen", self.url.removeprefix("http://"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        wait_until(self._answers, what=f"{command} to answer", timeout_s=30)

    def _answers(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"exited: {self.log()}")
        try:
            return httpx.get(self.url + "/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def log(self) -> str:
        return self.log_path.read_text("utf-8", "replace")

    def lines(self) -> list[str]:
        return self.log().splitlines()

    def stop(self) -> str:
        """SIGTERM, wait for the end, and the whole output."""
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(30)
        return self.log()


@pytest.fixture
def start(tmp_path: Path) -> Iterator[type[Service]]:
    started: list[Service] = []

    class Started(Service):
        def __init__(self, command: str, dsn: str, *args: str) -> None:
            super().__init__(command, dsn, tmp_path / f"{command}-{len(started)}.log", *args)
            started.append(self)

    yield Started
    for service in started:
        if service.process.poll() is None:
            service.process.kill()
        service.process.wait(10)


@pytest.mark.parametrize("command", SERVICES)
def test_the_start_line_says_what_where_which_schema_and_layout(
    command: str, start: type[Service], dsn: str
) -> None:
    service = start(command, make_conninfo(dsn, password=SECRET))

    first = service.lines()[0]
    assert first.startswith("serving " if command == "serve" else "collect: ")
    assert service.url in first
    assert "password=***" in first
    assert "schema 'public'" in first if command == "serve" else "schema public" in first
    assert first.endswith(f"layout {LAYOUT})")
    assert SECRET not in service.log()


@pytest.mark.parametrize("command", SERVICES)
def test_a_port_in_use_is_one_line_and_exit_2(command: str, dsn: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "otel_jobsteps.cli", command, "--dsn", dsn,
             "--listen", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=60,
        )  # fmt: skip

    assert result.returncode == 2
    assert result.stderr == (
        f"otel-jobsteps: error: cannot listen on 127.0.0.1:{port}: the port is in use by another"
        " process (stop it or pass another --listen)\n"
    )


def _access_lines(service: Service) -> list[dict[str, object]]:
    return [json.loads(line) for line in service.lines() if line.startswith("{")]


def test_serve_access_log_masks_the_token(start: type[Service], dsn: str) -> None:
    service = start("serve", dsn, "--token", TOKEN, "--access-log")
    httpx.get(f"{service.url}/steps?window=1h&token={TOKEN}", timeout=5)
    httpx.get(f"{service.url}/running", timeout=5)
    service.stop()

    lines = _access_lines(service)
    redirect = {k: v for k, v in lines[-2].items() if k != "duration_ms"}
    expected = {"service": "serve", "method": "GET", "status": 303}
    assert redirect == {**expected, "path": "/steps?window=1h&token=***"}
    assert (lines[-1]["path"], lines[-1]["status"]) == ("/running", 401)
    assert all(isinstance(line["duration_ms"], float) for line in lines)
    assert TOKEN not in service.log()


def test_without_access_log_no_request_is_logged(start: type[Service], dsn: str) -> None:
    service = start("serve", dsn)
    httpx.get(f"{service.url}/steps", timeout=5)
    service.stop()

    assert _access_lines(service) == []


def _job_request() -> bytes:
    """One job of two steps as an OTLP/protobuf body, as the SDK's exporter encodes it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    with tracer.start_as_current_span("job", attributes=JOB):
        for key in ("RENDER", "SAVE"):
            tracer.start_span(key.lower(), attributes={"job.step.key": key}).end()
    provider.shutdown()
    return request_of(proto_spans(exporter.get_finished_spans())).SerializeToString()


def test_collect_access_log_counts_spans_staged(start: type[Service], dsn: str) -> None:
    service = start("collect", dsn, "--access-log")
    reply = httpx.post(service.url + "/v1/traces", content=_job_request(), headers=PROTOBUF)
    output = service.stop()

    assert reply.status_code == 200
    line = _access_lines(service)[-1]
    assert (line["method"], line["path"], line["status"]) == ("POST", "/v1/traces", 200)
    assert line["spans_staged"] == 3
    assert output.rstrip().endswith(" answered since start, 3 spans staged)")


def test_sigterm_says_it_drained_the_request_in_flight(start: type[Service], dsn: str) -> None:
    """A request whose body is half sent when SIGTERM comes is answered, then the stop line
    counts it."""
    service = start("collect", dsn)
    body = _job_request()
    host, port = service.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as upload:
        upload.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/x-protobuf\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body[:10]
        )
        # Answered after the upload's request began in the app: the event loop runs tasks in
        # the order they were made.
        assert httpx.get(service.url + "/healthz", timeout=5).status_code == 200
        service.process.send_signal(signal.SIGTERM)
        wait_until(lambda: _refused(host, int(port)), what="collect to stop accepting")
        upload.sendall(body[10:])
        answer = upload.recv(65536)
    service.process.wait(30)

    assert answer.startswith(b"HTTP/1.1 200 ")
    stopped = re.fullmatch(
        r"collect: stopped on SIGTERM: drained (\d+) requests in flight"
        r" \(\d+ answered since start, 3 spans staged\)",
        service.lines()[-1],
    )
    assert stopped is not None
    # The upload at least; the health check too if the signal came before its last line ran.
    assert 1 <= int(stopped.group(1)) <= 2


def _refused(host: str, port: int) -> bool:
    """Whether a new connection is refused: the server has begun to stop."""
    try:
        socket.create_connection((host, port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.fixture
def proxy(dsn: str) -> Iterator[FaultProxy]:
    with FaultProxy(Upstream.from_dsn(dsn)) as fault_proxy:
        yield fault_proxy


def _run_one_job(processor: JobStepsProcessor) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests")
    with tracer.start_as_current_span("job", attributes=JOB):
        tracer.start_span("render", attributes={"job.step.key": "RENDER"}).end()
    return provider


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_shutdown_with_the_database_down_says_what_it_dropped(
    writer: str, proxy: FaultProxy, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    proxy.set_mode(Mode.REFUSE)
    processor = JobStepsProcessor(
        proxy.dsn_for(dsn, password=SECRET),
        writer=writer,
        connect_timeout_s=1,
        shutdown_timeout_ms=10_000,
    )
    provider = _run_one_job(processor)
    with caplog.at_level(logging.WARNING, logger="otel_jobsteps"):
        provider.shutdown()

    dropped = processor.stats()["dropped_operations"]
    assert dropped > 0
    said = [r.getMessage() for r in caplog.records if "shutdown dropped" in r.getMessage()]
    assert len(said) == 1
    assert said[0].startswith(
        f"otel_jobsteps shutdown dropped {dropped} operations: the database did not take them ("
    )
    assert SECRET not in caplog.text


def test_a_short_force_flush_says_what_is_still_queued(
    proxy: FaultProxy, dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    proxy.set_mode(Mode.BLACKHOLE)
    processor = JobStepsProcessor(proxy.dsn_for(dsn), connect_timeout_s=1)
    provider = _run_one_job(processor)
    with caplog.at_level(logging.WARNING, logger="otel_jobsteps"):
        flushed = processor.force_flush(200)
    proxy.set_mode(Mode.PASS)
    assert processor.force_flush(30_000)
    provider.shutdown()

    assert flushed is False
    assert processor.stats()["flushes_incomplete"] == 1
    said = [r.getMessage() for r in caplog.records if "force_flush" in r.getMessage()]
    assert len(said) == 1
    assert said[0].startswith("otel_jobsteps force_flush(200) returned before everything was")


async def _any_path(scope: Scope, receive: Receive, send: Send) -> None:
    """An ASGI app that answers every path, and its lifespan."""
    if scope["type"] == "http":
        await PlainTextResponse("any path")(scope, receive, send)
        return
    while (await receive())["type"] == "lifespan.startup":
        await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})


def test_an_access_line_is_one_line_of_json_whatever_the_path() -> None:
    lines: list[str] = []
    ticks = iter([10.0, 10.25])
    logged = RequestLog(
        _any_path,
        name="serve",
        access_log=True,
        write=lines.append,
        clock=lambda: next(ticks),
    )
    with TestClient(logged) as client:
        client.get("/a%0Ab%1B[31m/é?q=%0A&TOKEN=s3cret&token=again")

    assert len(lines) == 2  # the request, then the stop line
    assert lines[0].isascii()
    assert json.loads(lines[0]) == {
        "service": "serve",
        "method": "GET",
        "path": "/a%0Ab%1B[31m/%C3%A9?q=%0A&TOKEN=***&token=***",
        "status": 200,
        "duration_ms": 250.0,
    }
    assert lines[1] == (
        "serve: stopped without a stop signal: drained 0 requests in flight"
        " (1 answered since start)"
    )
