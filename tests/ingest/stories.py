"""Job stories told through a real tracer: the same spans go to the processor and to collect."""

from __future__ import annotations

import time

from opentelemetry.trace import Tracer

from otel_jobsteps import job_attempt, progress, record_event, record_job_event, step
from otel_jobsteps.attributes import JOB_OUTCOME, JOB_STEP_DETAIL, OUTCOME_TARGET_DELETED


def seed_story(tracer: Tracer, job_id: str = "42") -> None:
    """The seed: attempt 1 renders and fails to save; a retry is scheduled; attempt 2 succeeds."""
    for made in (0, 1):
        try:
            with job_attempt("render", job_id, "thumbnail", made, tracer=tracer):
                with step("RENDER", tracer=tracer):
                    progress(pct=50)
                    progress(pct=100, frames=3)
                with tracer.start_as_current_span("plain span inside the job"):
                    with step("SAVE", tracer=tracer):
                        progress(bytes=10)
                        if made == 0:
                            raise OSError("disk full")
        except OSError:
            record_job_event(
                "render", job_id, "RETRY_SCHEDULED", "retry after: disk full", tracer=tracer
            )


def other_paths(tracer: Tracer, job_id: str = "7") -> None:
    """Explicit detail over progress, an ordinary event inside a job, target deleted, a step
    entered twice, a late finish past the time limit."""
    with job_attempt("mail", job_id, "digest", tracer=tracer) as span:
        with step("COLLECT", tracer=tracer) as collect:
            progress(n=1)
            collect.set_attribute(JOB_STEP_DETAIL, '{"n": 99, "why": "explicit"}')
        record_event("LOG", "halfway", tracer=tracer, note="<script>x</script>\u0000")
        with step("SEND", tracer=tracer):
            with step("SEND", tracer=tracer):
                progress(to="a@b")
        span.set_attribute(JOB_OUTCOME, OUTCOME_TARGET_DELETED)
    with job_attempt("mail", job_id + "-late", "digest", time_limit=0.001, tracer=tracer):
        with step("SLOW", tracer=tracer):
            time.sleep(0.01)


def tell_all(tracer: Tracer) -> None:
    seed_story(tracer)
    other_paths(tracer)
