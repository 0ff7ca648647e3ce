"""``otel-jobsteps explain`` on an OTLP/JSON file of the spans of the dialects written from
their sources (cicd, genai, temporal, hatchet, trigger, oban, sidekiq, dbos): made with the real
SDK and its OTLP encoder, shaped as tests/unit/test_dialects_*.py cite them, read back as collect
reads them (decode, the order rule, held units)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import Attributes, AttributeValue

from tests.acceptance.test_cli import TIMEOUT_S, _command, _environment
from tests.ingest.requests import as_otlp_json, proto_spans, request_of

BASE_NS = 1_700_000_000_000_000_000
MS = 1_000_000


class Spans:
    """Spans with the times given (milliseconds), ended together once all are made."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer
        self._ends: list[tuple[Span, int]] = []

    def add(
        self,
        name: str,
        parent: Span | None,
        start: int,
        end: int,
        attributes: Attributes = None,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        error: str | None = None,
    ) -> Span:
        context = Context() if parent is None else trace.set_span_in_context(parent)
        span = self._tracer.start_span(
            name, context, kind, attributes, start_time=BASE_NS + start * MS
        )
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        self._ends.append((span, BASE_NS + end * MS))
        return span

    def end(self) -> None:
        for span, end_ns in self._ends:
            span.end(end_time=end_ns)


def _cicd(spans: Spans) -> None:
    pipeline: dict[str, AttributeValue] = {
        "cicd.pipeline.name": "deploy",
        "cicd.pipeline.run.id": "run-7",
        "cicd.pipeline.result": "failure",
    }
    run = spans.add("RUN deploy", None, 0, 100, pipeline, kind=SpanKind.SERVER)
    for name, start, result in (
        ("build", 10, "success"),
        ("lint", 30, "skip"),
        ("test", 40, "failure"),
    ):
        task: dict[str, AttributeValue] = {
            "cicd.pipeline.task.name": name,
            "cicd.pipeline.task.run.id": name,
            "cicd.pipeline.task.run.result": result,
        }
        spans.add(name, run, start, start + 10, task)


def _genai(spans: Spans) -> None:
    agent = spans.add(
        "invoke_agent Researcher",
        None,
        0,
        100,
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "Researcher",
            "gen_ai.conversation.id": "conv-1",
        },
    )
    chat: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30,
    }
    spans.add("chat gpt-4o", agent, 10, 30, chat, kind=SpanKind.CLIENT)
    spans.add(
        "execute_tool search",
        agent,
        30,
        60,
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"},
    )


def _temporal(spans: Spans) -> None:
    ids = {"temporalWorkflowID": "order-1", "temporalRunID": "9b2f"}
    workflow = spans.add("RunWorkflow:OrderWorkflow", None, 0, 1000, ids, kind=SpanKind.SERVER)
    schedule = spans.add("StartActivity:charge", workflow, 10, 11, ids, kind=SpanKind.CLIENT)
    for start, error in ((20, "ValueError: declined"), (130, "ValueError: declined"), (340, None)):
        spans.add(
            "RunActivity:charge",
            schedule,
            start,
            start + 10,
            {**ids, "temporalActivityID": "1"},
            kind=SpanKind.SERVER,
            error=error,
        )


def _queues(spans: Spans) -> None:
    hatchet: dict[str, AttributeValue] = {
        "instrumentor": "hatchet",
        "hatchet.step_run_id": "sr-77",
        "hatchet.step_name": "send_email",
        "hatchet.workflow_name": "onboarding",
        "hatchet.retry_count": 1,
    }
    spans.add("hatchet.start_step_run", None, 0, 10, hatchet, kind=SpanKind.CONSUMER)
    attempt: dict[str, AttributeValue] = {
        "$span.attempt": True,
        "$entity.type": "attempt",
        "$metadata.ctx.run.id": "run_cm4x9",
        "$metadata.ctx.attempt.number": 2,
        "$metadata.ctx.task.id": "resize-image",
        "$metadata.ctx.queue.name": "task/resize-image",
    }
    spans.add("Attempt 2", None, 0, 10, attempt, kind=SpanKind.CONSUMER)
    oban: dict[str, AttributeValue] = {
        "messaging.system": "oban",
        "messaging.destination.name": "mailers",
        "oban.job.job_id": 123,
        "oban.job.worker": "Mailer",
        "oban.job.attempt": 2,
        "oban.job.max_attempts": 3,
    }
    spans.add("Mailer process", None, 0, 10, oban, kind=SpanKind.CONSUMER, error="boom")
    sidekiq: dict[str, AttributeValue] = {
        "messaging.system": "sidekiq",
        "messaging.sidekiq.job_class": "HardWorker",
        "messaging.message_id": "jid-1",
        "messaging.destination": "default",
        "messaging.operation": "process",
    }
    spans.add("default process", None, 0, 10, sidekiq, kind=SpanKind.CONSUMER)
    workflow = spans.add(
        "checkout", None, 0, 100, {"operationUUID": "wf-9", "operationType": "workflow"}
    )
    spans.add("reserve_stock", workflow, 10, 30, {"operationUUID": "wf-9", "operationType": "step"})


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans = Spans(provider.get_tracer("dialects-test"))
    for make in (_cicd, _genai, _temporal, _queues):
        make(spans)
    spans.end()
    provider.shutdown()
    path = tmp_path_factory.mktemp("explain") / "traces.jsonl"
    path.write_bytes(as_otlp_json(request_of(proto_spans(exporter.get_finished_spans()))) + b"\n")
    return path


def test_each_dialect_says_what_its_spans_become(traces: Path) -> None:
    result = subprocess.run(
        [_command(), "explain", str(traces), "--dialects", "all"],
        capture_output=True,
        text=True,
        env=_environment(None),
        timeout=TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = [line.strip() for line in result.stdout.splitlines()]
    for expected in (
        "RUN deploy [cicd]: job deploy / run-7 #1 (deploy)",
        "lint [cicd]: step lint of deploy / run-7 #1 (deploy), skipped",
        "test [cicd]: step test of deploy / run-7 #1 (deploy)",
        "RunWorkflow:OrderWorkflow [temporal]: job temporal / order-1 #1 (OrderWorkflow)",
        "hatchet.start_step_run [hatchet]: job onboarding / sr-77 #2 (send_email)",
        "Attempt 2 [trigger]: job task/resize-image / run_cm4x9 #2 (resize-image)",
        "Mailer process [oban]: job mailers / 123 #2 (Mailer)",
        "default process [sidekiq]: job default / jid-1 #1 (HardWorker)",
        "checkout [dbos]: job dbos / wf-9 #1 (checkout)",
        "reserve_stock [dbos]: step reserve_stock of dbos / wf-9 #1 (checkout)",
    ):
        assert expected in lines
    charge = "RunActivity:charge [temporal]: step charge of temporal / order-1 #1 (OrderWorkflow)"
    assert lines.count(charge) == 3  # every attempt, under the job though its parent had ended
    (agent,) = [line for line in lines if line.startswith("invoke_agent Researcher [genai]: job")]
    job = agent.removeprefix("invoke_agent Researcher [genai]: job ")
    assert re.fullmatch(r"gen_ai / [0-9a-f]{16} #1 \(Researcher\)", job)
    assert f"execute_tool search [genai]: step search of {job}" in lines
    assert f"chat gpt-4o [genai]: step chat gpt-4o of {job}" in lines
