"""``otel-jobsteps explain FILE``, run as a user runs it, on OTLP/JSON files holding each
dialect's spans: Celery's from the real ``opentelemetry-instrumentation-celery`` (a real
``task.apply()``), the others from the SDK shaped as their sources emit them (the sources are
cited in tests/unit/test_dialects_*.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery, Task
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Tracer

from otel_jobsteps._core.dialects import DIALECT_NAMES
from tests.acceptance.test_cli import TIMEOUT_S, _command, _environment, one_error_line
from tests.ingest.requests import as_otlp_json, proto_spans, request_of

HOSTILE = "m-1\x1b[2J\u202e"


def _celery_runs(provider: TracerProvider, tracer: Tracer) -> None:
    """A task that retries once, run twice through Celery's own tracing (no broker: apply)."""
    app = Celery("explained", broker="memory://", backend="cache+memory://")

    @app.task(bind=True, name="app.thumbnail")
    def thumbnail(self: Task) -> None:
        with tracer.start_as_current_span("render", attributes={"job.step.key": "RENDER"}):
            pass
        if self.request.retries < 1:
            raise self.retry(exc=OSError("disk full"), countdown=0)

    instrumentor = CeleryInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        thumbnail.apply(task_id="t-1")
    finally:
        instrumentor.uninstrument()


def _messaging(tracer: Tracer) -> None:
    """pika's consumer span (utils.py:137-191): started bare, then its attributes."""
    with tracer.start_as_current_span("thumbnails receive", kind=SpanKind.CONSUMER) as span:
        span.set_attributes(
            {
                "messaging.system": "rabbitmq",
                "messaging.operation": "receive",
                "messaging.destination": "thumbnails",
                "messaging.message.id": HOSTILE,
                "net.peer.name": "127.0.0.1",
                "net.peer.port": 5672,
            }
        )
        with tracer.start_as_current_span("upload", attributes={"job.step.key": "UPLOAD"}):
            pass
        with tracer.start_as_current_span("SELECT 1"):
            pass


def _bullmq(tracer: Tracer) -> None:
    """bullmq 6.7.6's process span (worker.js:575-580, 634)."""
    with tracer.start_as_current_span("process render", kind=SpanKind.CONSUMER) as span:
        span.set_attributes({"bullmq.queue.name": "render", "bullmq.queue.operation": "process"})
        span.set_attributes({"bullmq.job.id": "42", "bullmq.job.name": "resize"})
        with tracer.start_as_current_span("resize", attributes={"job.step.key": "RESIZE"}):
            pass
        span.set_attribute("bullmq.job.attempts.made", 2)


def _others(tracer: Tracer) -> None:
    with tracer.start_as_current_span("GET /health", kind=SpanKind.SERVER):
        pass
    broken = {"job.domain": "render", "job.id": "7", "job.attempt": 0}
    with tracer.start_as_current_span("broken job", attributes=broken):
        pass
    with tracer.start_as_current_span("orphan step", attributes={"job.step.key": "LOST"}):
        pass
    with tracer.start_as_current_span("legacy run", attributes={"legacy.id": "L-9"}):
        pass


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file in the Collector's file exporter format: one request per line."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("explain-test")
    _celery_runs(provider, tracer)
    first = exporter.get_finished_spans()
    exporter.clear()
    _messaging(tracer)
    _bullmq(tracer)
    _others(tracer)
    second = exporter.get_finished_spans()
    provider.shutdown()
    path = tmp_path_factory.mktemp("explain") / "traces.jsonl"
    lines = [as_otlp_json(request_of(proto_spans(spans))) for spans in (first, second)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _explain(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_command(), "explain", *args],
        input=None if stdin is None else stdin.decode("utf-8", "surrogateescape"),
        capture_output=True,
        text=True,
        env=_environment(None),
        timeout=TIMEOUT_S,
        check=False,
    )


def _lines(result: subprocess.CompletedProcess[str]) -> Iterator[str]:
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return (line.strip() for line in result.stdout.splitlines())


def test_each_dialect_says_what_its_spans_become(traces: Path) -> None:
    lines = list(
        _lines(_explain(str(traces), "--dialects", "all", "--mapping", "id=legacy.id,domain=x"))
    )
    for expected in (
        "run/app.thumbnail [celery]: job celery / t-1 #1 (app.thumbnail)",
        "render [celery]: step RENDER of celery / t-1 #1 (app.thumbnail)",
        "run/app.thumbnail [celery]: job celery / t-1 #2 (app.thumbnail)",
        "thumbnails receive [messaging]: job thumbnails / m-1\\x1b[2J\\u202e #1",
        "upload [messaging]: step UPLOAD of thumbnails / m-1\\x1b[2J\\u202e #1",
        "SELECT 1 [messaging]: in thumbnails / m-1\\x1b[2J\\u202e #1, not a step (no job.step.key)",
        "process render [bullmq]: job render / 42 #2 (resize)",
        "resize [bullmq]: step RESIZE of render / 42 #2 (resize)",
        "legacy run [mapping]: in no job: invalid_job_span: span 'legacy run' ignored: needs "
        "non-empty job.domain and job.id (<= 512 characters and 1024 bytes) and an integer "
        "job.attempt in 1..2147483647",
        "GET /health: in no job: no job.* attributes, and no selected dialect claims it",
        "orphan step: in no job: it has job.step.key but no job span above it",
    ):
        assert expected in lines
    assert sum(line.startswith("broken job: in no job: invalid_job_span") for line in lines) == 1
    assert sum(line.startswith("trace ") for line in lines) == 8  # 2 Celery runs, 6 others


def test_a_dialect_not_selected_is_named(traces: Path) -> None:
    lines = list(_lines(_explain(str(traces), "--dialects", "celery")))
    assert (
        "thumbnails receive: in no job: no job.* attributes; the messaging dialect would claim "
        "it, but it is not selected (--dialects)"
    ) in lines
    assert "upload: in no job: it has job.step.key but no job span above it" in lines
    assert "run/app.thumbnail [celery]: job celery / t-1 #1 (app.thumbnail)" in lines


def test_stdin_and_the_environments_selection(traces: Path) -> None:
    result = subprocess.run(
        [_command(), "explain", "-"],
        input=traces.read_text("utf-8"),
        capture_output=True,
        text=True,
        env=_environment(None, OTEL_JOBSTEPS_DIALECTS="none"),
        timeout=TIMEOUT_S,
        check=False,
    )
    lines = list(_lines(result))
    assert "run/app.thumbnail: in no job: no job.* attributes; the celery dialect would claim " \
        "it, but it is not selected (--dialects)" in lines  # fmt: skip


@pytest.mark.parametrize(
    ("content", "says"),
    [
        pytest.param(b"not json\n", "traces.jsonl:1: not OTLP/JSON: Expecting value", id="text"),
        pytest.param(b'{"spans": []}\n', "no resourceSpans", id="no-request"),
        pytest.param(b'{"resourceSpans": 3}\n', "not OTLP/JSON", id="wrong-shape"),
        pytest.param(b"\n[]\n", "traces.jsonl:2: not OTLP/JSON", id="array"),
    ],
)
def test_input_that_is_not_otlp_json_is_one_line_and_exit_2(
    tmp_path: Path, content: bytes, says: str
) -> None:
    path = tmp_path / "traces.jsonl"
    path.write_bytes(content)
    assert says in one_error_line(_explain(str(path)))


def test_other_signals_lines_are_skipped(tmp_path: Path, traces: Path) -> None:
    path = tmp_path / "signals.jsonl"
    other = b'{"resourceLogs": []}\n{"resourceMetrics": []}\n'
    path.write_bytes(other + traces.read_bytes())
    assert list(_lines(_explain(str(path)))) == list(_lines(_explain(str(traces))))


def test_a_missing_file_and_an_unknown_dialect_are_one_line_and_exit_2(tmp_path: Path) -> None:
    assert "cannot read" in one_error_line(_explain(str(tmp_path / "absent.jsonl")))
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert "unknown dialect 'rabbit'" in one_error_line(
        _explain(str(empty), "--dialects", "rabbit")
    )


def test_dialects_lists_each_in_the_order_tried_with_its_default_and_source() -> None:
    result = subprocess.run(
        [_command(), "dialects"], capture_output=True, text=True, env=_environment(None),
        timeout=TIMEOUT_S, check=False,
    )  # fmt: skip
    rows = [line.split(maxsplit=2) for line in _lines(result)]
    assert tuple(row[0] for row in rows) == DIALECT_NAMES
    assert [row[0] for row in rows if row[1] == "opt-in"] == ["messaging"]
    assert rows[1][2].startswith("opentelemetry-instrumentation-celery 0.66b2")
