"""What the worker processes the integration tests start share (never imported by pytest).

Tracing: the DSN comes from OTEL_JOBSTEPS_DSN; JOBSTEPS_TEST_SPANS names a file that receives
one JSON line per ended span (name, ids, parent), so a test can check the span layout. And the
two ways a job body misbehaves: dying mid-step, and overrunning the queue's time limit.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from otel_jobsteps import JobStepsProcessor, record_job_event

DOMAIN = os.environ.get("JOBSTEPS_TEST_DOMAIN", "test")
QUEUE = os.environ.get("JOBSTEPS_TEST_QUEUE", "otel-jobsteps-test")


class SpanFileExporter(SpanExporter):
    """Appends one JSON line per span; O_APPEND keeps lines whole across processes."""

    def __init__(self, path: str) -> None:
        self._path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = []
        for span in spans:
            parent = span.parent
            lines.append(
                json.dumps(
                    {
                        "name": span.name,
                        "span_id": format(span.context.span_id, "016x"),
                        "parent_id": None if parent is None else format(parent.span_id, "016x"),
                        "pid": os.getpid(),
                        "attributes": {k: str(v) for k, v in (span.attributes or {}).items()},
                    }
                )
            )
        with open(self._path, "a", encoding="utf-8") as file:
            file.write("".join(line + "\n" for line in lines))
        return SpanExportResult.SUCCESS


def setup_tracing() -> TracerProvider:
    """Install a provider with a JobStepsProcessor; write a first row so the writer is live.

    A live writer thread and an open connection before the queue forks its work processes is
    what makes the fork-safety check real: the children must not share them.
    """
    provider = TracerProvider()
    provider.add_span_processor(JobStepsProcessor(heartbeat_interval_s=1.0))
    spans_file = os.environ.get("JOBSTEPS_TEST_SPANS")
    if spans_file:
        provider.add_span_processor(SimpleSpanProcessor(SpanFileExporter(spans_file)))
    trace.set_tracer_provider(provider)
    record_job_event(DOMAIN, f"boot-{os.getpid()}", "BOOT", tracer=provider.get_tracer("boot"))
    if not provider.force_flush(10_000):
        raise RuntimeError("the boot row did not reach the database")
    return provider


def die_now() -> None:
    """Write the rows so far, then die by SIGKILL (like the OOM killer): no cleanup runs."""
    trace.get_tracer_provider().force_flush(10_000)  # type: ignore[attr-defined]
    os.kill(os.getpid(), signal.SIGKILL)


def sleep_past_limit(limit_error: type[BaseException], swallow: bool) -> None:
    """Sleep 5 s, which the queue's time limit interrupts with ``limit_error``.

    The error propagates, or, with ``swallow``, a cleanup outlives the limit and the body
    returns as if successful.
    """
    try:
        time.sleep(5)
    except limit_error:
        if not swallow:
            raise
        time.sleep(0.3)
