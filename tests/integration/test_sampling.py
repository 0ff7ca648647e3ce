"""RecordJobsSampler on a real SDK and PostgreSQL: at a 5 % trace ratio every job and step is in
the tables, the exporter gets exactly the sampled traces, and spans outside jobs are dropped.

Trace ids come from a seeded generator, so which traces the ratio samples is known in advance
and the counts are the same on every run.
"""

from __future__ import annotations

import random
import textwrap
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Tracer

from otel_jobsteps import JOB_STEP_KEY, JobStepsProcessor, RecordJobsSampler, job_attempt, step
from otel_jobsteps.sampling import ENTRY_POINT
from tests.helpers import rows, run_instrumented

JOBS, STEPS = 200, 4  # 800 steps
RATIO = 0.05


class SeededIds(IdGenerator):
    """Random ids from a fixed seed: the same traces on every run."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def generate_span_id(self) -> int:
        return self._random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        return self._random.getrandbits(128) or 1


def _sampled_by_ratio(trace_id: int) -> bool:
    """What TraceIdRatioBased(RATIO) decides for a root span of ``trace_id``."""
    return trace_id & TraceIdRatioBased.TRACE_ID_LIMIT < TraceIdRatioBased(RATIO).bound


def _sampled_provider(dsn: str) -> tuple[Tracer, TracerProvider, InMemorySpanExporter]:
    """A provider with the sampler at RATIO, seeded ids, the processor and an exporter behind
    the SDK's BatchSpanProcessor (which exports sampled spans only)."""
    exporter = InMemorySpanExporter()
    processor = JobStepsProcessor(dsn)
    provider = TracerProvider(
        sampler=RecordJobsSampler(ParentBased(TraceIdRatioBased(RATIO))), id_generator=SeededIds(7)
    )
    provider.add_span_processor(processor)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider.get_tracer("tests.sampling"), provider, exporter


def test_every_job_and_step_is_recorded_while_the_exporter_gets_the_sampled_traces(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    tracer, provider, exporter = _sampled_provider(dsn)
    trace_ids = []
    try:
        for number in range(JOBS):
            with job_attempt("render", f"s{number}", "thumbnail", tracer=tracer) as job:
                trace_ids.append(job.get_span_context().trace_id)
                for key in range(STEPS):
                    with step(f"STEP{key}", tracer=tracer):
                        with tracer.start_as_current_span("query") as plain:
                            # A plain span in a job is recorded too (the processor sees it).
                            assert plain.is_recording()
        assert provider.force_flush(30_000)
    finally:
        provider.shutdown()

    assert rows(
        conn,
        "SELECT count(*), count(DISTINCT job_id) FROM job_event WHERE type = 'STEP'"
        " AND step_status = 'COMPLETED'",
    ) == [(JOBS * STEPS, JOBS)]
    assert rows(conn, "SELECT count(*) FROM job_log WHERE status = 'COMPLETED'") == [(JOBS,)]
    sampled = {trace_id for trace_id in trace_ids if _sampled_by_ratio(trace_id)}
    assert 0.02 * JOBS <= len(sampled) <= 0.10 * JOBS  # about 5 %: 5 of 200 with this seed
    exported = exporter.get_finished_spans()
    assert {span.context.trace_id for span in exported} == sampled
    # Each sampled trace whole: its job span, its steps and the plain spans in them.
    assert len(exported) == len(sampled) * (1 + 2 * STEPS)


def test_spans_outside_jobs_keep_the_roots_decision(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    tracer, provider, exporter = _sampled_provider(dsn)
    recording = []
    try:
        for _ in range(100):
            with tracer.start_as_current_span("request") as request:
                with tracer.start_as_current_span("query") as query:
                    sampled = _sampled_by_ratio(request.get_span_context().trace_id)
                    recording.append((request.is_recording(), query.is_recording(), sampled))
        assert provider.force_flush(30_000)
    finally:
        provider.shutdown()

    # Recorded exactly when sampled: a dropped request and its children stay non-recording.
    assert all(request == query == sampled for request, query, sampled in recording)
    assert any(sampled for _, _, sampled in recording)
    assert len(exporter.get_finished_spans()) == 2 * sum(s for _, _, s in recording)
    assert rows(conn, "SELECT count(*) FROM job_event") == [(0,)]


@pytest.mark.parametrize(("dialects", "recorded"), [("celery", True), ("none", False)])
def test_a_job_only_a_dialect_names_is_kept_when_the_sampler_selects_its_dialect(
    dsn: str, conn: psycopg.Connection[Any], dialects: str, recorded: bool
) -> None:
    """A Celery run as OpenTelemetry's Celery instrumentation traces it (``run/<task>``,
    CONSUMER, its attributes set at its end), nothing sampled: the processor reads it through
    its dialect only when the sampler, asking the same dialect, kept the span recording."""
    task_id = uuid.uuid4().hex
    exporter = InMemorySpanExporter()
    processor = JobStepsProcessor(dsn, dialects="celery")
    sampler = RecordJobsSampler(ParentBased(TraceIdRatioBased(0.0)), dialects=dialects)
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.sampling")
    try:
        with tracer.start_as_current_span("run/tasks.render", kind=SpanKind.CONSUMER) as run:
            for key in ("RENDER", "SAVE"):
                with tracer.start_as_current_span(key.lower(), attributes={JOB_STEP_KEY: key}):
                    pass
            run.set_attributes(
                {
                    "celery.action": "run",
                    "celery.state": "SUCCESS",
                    "messaging.message.id": task_id,
                    "celery.task_name": "tasks.render",
                }
            )
        assert processor.force_flush(30_000)
    finally:
        processor.shutdown()

    steps = rows(
        conn,
        "SELECT step_key, step_status FROM job_event WHERE job_id = %s AND type = 'STEP'"
        " ORDER BY created_at, id",
        task_id,
    )
    assert steps == ([("RENDER", "COMPLETED"), ("SAVE", "COMPLETED")] if recorded else [])
    assert exporter.get_finished_spans() == ()


SCRIPT = """
from opentelemetry import trace
from otel_jobsteps import job_attempt, step

print("sampler:", trace.get_tracer_provider().sampler.get_description())
with job_attempt("render", "{job_id}", "thumbnail"):
    with step("RENDER"):
        pass
    with step("SAVE"):
        pass
"""


def test_zero_code_the_environment_names_the_sampler(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """``OTEL_TRACES_SAMPLER`` names the entry point, resolved by the SDK's configurator:
    at ratio 0 the console exporter prints no span and the steps are still rows."""
    pytest.importorskip("opentelemetry.distro", reason="needs opentelemetry-distro")
    job_id = uuid.uuid4().hex[:8]
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(SCRIPT.format(job_id=job_id)))
    done = run_instrumented(
        script,
        OTEL_JOBSTEPS_DSN=dsn,
        OTEL_TRACES_SAMPLER=ENTRY_POINT,
        OTEL_TRACES_SAMPLER_ARG="0",
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
    )

    assert "sampler: RecordJobsSampler{ParentBased{root:TraceIdRatioBased{0.0}" in done.stdout
    assert '"trace_id"' not in done.stdout  # the console exporter got no span
    assert rows(
        conn,
        "SELECT step_key, step_status FROM job_event WHERE job_id = %s AND type = 'STEP'"
        " ORDER BY created_at, id",
        job_id,
    ) == [("RENDER", "COMPLETED"), ("SAVE", "COMPLETED")]
    assert rows(conn, "SELECT status FROM job_log WHERE job_id = %s", job_id) == [("COMPLETED",)]
