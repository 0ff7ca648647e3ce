"""Other instrumentations' job spans (`_core.dialects`) give the same rows through both doors.

Each story shapes spans as its source emits them (names, kinds, and attributes set when the
source sets them: Celery's at the run's end), told through a real tracer to the processor
(which holds a claimed span with what happens in it until it ends) and, as OTLP, to collect
(which reads the trace's units as it derives)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from otel_jobsteps import JobStepsProcessor, step
from otel_jobsteps._core.dialects import select_dialects
from otel_jobsteps._ingest.decode import carry_resources, decode_protobuf
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging
from tests.ingest.collector import table_rows
from tests.ingest.requests import request_of
from tests.ingest.stories import Recording

Story = Callable[[Tracer, str], None]


def celery(tracer: Tracer, suffix: str) -> None:
    """opentelemetry-instrumentation-celery: ``run/<task>`` CONSUMER, named at its end; a run
    retried (state RETRY), then the retry that succeeds."""
    for retries, state in ((0, "RETRY"), (1, "SUCCESS")):
        run = tracer.start_span("run/resize", kind=SpanKind.CONSUMER)
        with trace.use_span(run, end_on_exit=False):
            with step("FETCH", tracer=tracer):
                pass
            if state == "RETRY":
                run.set_attribute("celery.retry.reason", "Retry in 1s: busy")
            else:
                with step("SAVE", tracer=tracer):
                    pass
        run.set_attributes(
            {
                "celery.action": "run",
                "celery.state": state,
                "messaging.message.id": f"task{suffix}",
                "celery.task_name": "resize",
                "messaging.destination": "images",
                **({"celery.retries": retries} if retries else {}),
            }
        )
        run.end()


def messaging(tracer: Tracer, suffix: str) -> None:
    """opentelemetry-instrumentation-pika's consumer span: ``<queue> receive``, CONSUMER,
    attributes set after its start; the callback's steps inside."""
    span = tracer.start_span("orders receive", kind=SpanKind.CONSUMER)
    span.set_attributes(
        {
            "messaging.system": "rabbitmq",
            "messaging.operation": "receive",
            "messaging.destination": "orders",
            "messaging.message.id": f"message{suffix}",
        }
    )
    with trace.use_span(span, end_on_exit=True):
        with step("VALIDATE", tracer=tracer):
            pass
        with step("STORE", tracer=tracer):
            pass


def genai(tracer: Tracer, suffix: str) -> None:
    """The GenAI conventions: an agent run, a model call and a tool call that fails."""
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "researcher",
        "gen_ai.conversation.id": f"conversation{suffix}",
    }
    with tracer.start_as_current_span("invoke_agent researcher", attributes=attributes):
        chat = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.usage.input_tokens": 120,
            "gen_ai.usage.output_tokens": 30,
        }
        with tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT, attributes=chat):
            pass
        tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}
        with tracer.start_as_current_span("execute_tool search", attributes=tool) as call:
            call.set_status(Status(StatusCode.ERROR, "search is down"))


def cicd(tracer: Tracer, suffix: str) -> None:
    """The CI/CD conventions: a pipeline run of task runs, one failing."""
    pipeline = {"cicd.pipeline.name": "build", "cicd.pipeline.run.id": f"run{suffix}"}
    with tracer.start_as_current_span("build", attributes=pipeline) as run:
        for name, result in (("checkout", "success"), ("test", "failure")):
            task = {
                "cicd.pipeline.task.name": name,
                "cicd.pipeline.task.run.id": f"{name}{suffix}",
                "cicd.pipeline.task.run.result": result,
            }
            with tracer.start_as_current_span(name, attributes=task):
                pass
        run.set_attribute("cicd.pipeline.result", "failure")


STORIES: dict[str, Story] = {
    "celery": celery,
    "messaging": messaging,
    "genai": genai,
    "cicd": cicd,
}


@pytest.fixture
def every_dialect(dsn: str) -> Iterator[Recording]:
    recorded = Recording(dsn, dialects="all")
    yield recorded
    recorded.close()


@pytest.fixture
def staging(second_dsn: str) -> Iterator[Staging]:
    found = Staging(CollectSettings(second_dsn, settle_after_s=0.0, connections=1, dialects=()))
    yield found
    found.close()


@pytest.mark.parametrize("name", list(STORIES))
@pytest.mark.parametrize("requests", ["one request", "each span alone"])
def test_a_dialects_jobs_give_the_same_rows_through_both_doors(
    every_dialect: Recording, dsn: str, second_dsn: str, name: str, requests: str
) -> None:
    settings = CollectSettings(second_dsn, settle_after_s=0.0, connections=1, dialects=(name,))
    staging = Staging(settings)
    try:
        spans = every_dialect.spans(STORIES[name], f"-{uuid.uuid4().hex[:8]}")
        parts = [spans] if requests == "one request" else [[span] for span in spans]
        for part in parts:
            decoded = decode_protobuf(request_of(part).SerializeToString())
            staging.receive(decoded.spans, decoded.wire)
        staging.settle()
    finally:
        staging.close()
    live = table_rows(dsn)
    events, logs = live
    assert logs, f"the {name} story wrote no attempt"
    assert events, f"the {name} story wrote no step"
    assert table_rows(second_dsn) == live


def test_without_the_dialect_neither_door_writes_a_row(dsn: str, second_dsn: str) -> None:
    recorded = Recording(dsn, dialects="none")
    staging = Staging(CollectSettings(second_dsn, settle_after_s=0.0, connections=1, dialects=()))
    try:
        for story in STORIES.values():
            spans = recorded.spans(story, "-none")
            decoded = decode_protobuf(request_of(spans).SerializeToString())
            staging.receive(decoded.spans, decoded.wire)
        staging.settle()
    finally:
        staging.close()
        recorded.close()
    assert table_rows(dsn) == table_rows(second_dsn) == ([], [])


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_a_pipelines_identity_on_the_resource_reaches_both_doors(
    dsn: str, second_dsn: str, writer: str
) -> None:
    """A CI system's exporter names the pipeline run on its resource, not on each span."""
    resource = Resource({"cicd.pipeline.run.id": "run-on-resource"})
    processor = JobStepsProcessor(dsn, dialects="cicd", writer=writer)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests")
    pipeline = {"cicd.pipeline.name": "deploy", "cicd.pipeline.result": "success"}
    with tracer.start_as_current_span("deploy", attributes=pipeline):
        for name in ("plan", "apply"):
            task = {
                "cicd.pipeline.task.name": name,
                "cicd.pipeline.task.run.id": f"{name}-1",
                "cicd.pipeline.task.run.result": "success",
            }
            with tracer.start_as_current_span(name, attributes=task):
                pass
    assert processor.force_flush(10_000)
    provider.shutdown()
    staging = Staging(
        CollectSettings(second_dsn, settle_after_s=0.0, connections=1, dialects=("cicd",))
    )
    try:
        for span in exporter.get_finished_spans():  # each alone: the job's tasks wait staged
            decoded = decode_protobuf(encode_spans([span]).SerializeToString())
            carry_resources(decoded, select_dialects("cicd"))
            staging.receive(decoded.spans, decoded.wire)
        staging.settle()
    finally:
        staging.close()
    events, logs = live = table_rows(dsn)
    assert [(row[1], row[4]) for row in logs] == [("run-on-resource", "COMPLETED")]
    assert [row[5] for row in events] == ["plan", "apply"]
    assert table_rows(second_dsn) == live
