"""Jobs beside open spans in the same process (issue 22): a job costs the same whether none,
50,000 attempts (100,000 open spans: the in-memory bound) or more than the bound hold an open
step in the process the job runs in.

For each writer (thread, process) and each count, side by side in one run, interleaved: a fresh
database, a fresh processor, ``held`` attempts whose job span and step span start and never end,
a flush, then ordinary jobs of two steps timed until their flush returns (the writer's work
included). Time spent in the job process's garbage collector during the timed part is reported
beside it (a large live structure makes its full collections longer).

    python -m benchmarks --only open-spans [--dsn DSN] [--quick]
"""

from __future__ import annotations

import gc
import time
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span, set_span_in_context

from otel_jobsteps import JOB_STEP_KEY, JobStepsProcessor

from .common import (
    Databases,
    Row,
    count_closed_steps,
    fmt_rate,
    fmt_ratio,
    job_attributes,
    median,
    run_jobs,
    verdict,
)

HELD = (0, 50_000, 60_000)  # attempts holding an open step: none, the bound, past it
TARGET_RATIO = 1.25
FLUSH_MS = 600_000


class _GcClock:
    """Seconds the collector ran in this process while ``running`` (gc.callbacks)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.running = False
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if not self.running:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started


def _hold(provider: TracerProvider, processor: JobStepsProcessor, held: int) -> list[Span]:
    """``held`` attempts, each a job span and a step span started and never ended (flushed in
    parts: none is dropped by a full queue)."""
    tracer = provider.get_tracer("benchmarks.open_spans")
    spans: list[Span] = []
    for number in range(held):
        job = tracer.start_span("job", attributes=job_attributes(f"held-{number}"))
        parent = set_span_in_context(job)
        spans += [job, tracer.start_span("EXPORT", context=parent, attributes={JOB_STEP_KEY: "X"})]
        if number % 10_000 == 9_999:
            processor.force_flush(FLUSH_MS)
    return spans


def once(dsn: str, writer: str, held: int, jobs: int, gc_clock: _GcClock) -> dict[str, Any]:
    """One measurement: seconds per job beside ``held`` open attempts, and whether all landed."""
    processor = JobStepsProcessor(dsn, writer=writer, shutdown_timeout_ms=60_000)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    try:
        kept = _hold(provider, processor, held)
        ready = processor.force_flush(FLUSH_MS)
        tracer = provider.get_tracer("benchmarks.open_spans")
        prefix = f"{writer}-{held}"
        gc.collect()
        gc_clock.seconds, gc_clock.running = 0.0, True
        started = time.perf_counter()
        run_jobs(tracer, prefix, jobs, steps=2, events=1)
        flushed = processor.force_flush(FLUSH_MS)
        elapsed = time.perf_counter() - started
        gc_clock.running = False
        steps, logs = count_closed_steps(dsn, prefix)
        del kept
        return {
            "per_job": elapsed / jobs,
            "gc_s": gc_clock.seconds,
            "verified": ready and flushed and (steps, logs) == (2 * jobs, jobs),
        }
    finally:
        provider.shutdown()


def measure(dbs: Databases, *, jobs: int, repetitions: int) -> dict[str, dict[int, Any]]:
    gc_clock = _GcClock()
    gc.callbacks.append(gc_clock)
    results: dict[str, dict[int, Any]] = {
        writer: {held: [] for held in HELD} for writer in ("thread", "process")
    }
    try:
        for _ in range(repetitions):
            for writer, by_held in results.items():
                for held in HELD:
                    dsn = dbs.fresh(f"spans_{writer}_{held}")
                    try:
                        by_held[held].append(once(dsn, writer, held, jobs, gc_clock))
                    finally:
                        dbs.drop(dsn)
    finally:
        gc.callbacks.remove(gc_clock)
    return results


def rows(results: dict[str, dict[int, Any]]) -> list[Row]:
    out: list[Row] = []
    for writer, by_held in results.items():
        base = median([run["per_job"] for run in by_held[0]])
        for held in HELD[1:]:
            runs = by_held[held]
            per_job = median([run["per_job"] for run in runs])
            gc_s = median([run["gc_s"] for run in runs])
            ratio = per_job / base
            ok = ratio <= TARGET_RATIO and all(run["verified"] for run in runs)
            out.append(
                Row(
                    "22",
                    f"two-step jobs beside {held:,} attempts holding open spans ({writer} writer;"
                    f" gc {gc_s:.2f} s)",
                    fmt_rate(1 / per_job, "jobs/s"),
                    f"{fmt_rate(1 / base, 'jobs/s')} beside none",
                    fmt_ratio(ratio),
                    f"<= {TARGET_RATIO}x",
                    verdict(ok),
                )
            )
    return out


def run(dbs: Databases, *, quick: bool) -> list[Row]:
    jobs, repetitions = (2_000, 1) if quick else (10_000, 3)
    return rows(measure(dbs, jobs=jobs, repetitions=repetitions))
