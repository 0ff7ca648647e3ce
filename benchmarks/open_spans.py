"""Jobs beside open spans in the same process (issue 22): a job costs the same whether none,
50,000 attempts (100,000 open spans: the in-memory bound) or more than the bound hold an open
step in the process the job runs in.

For each writer (thread, process) and each count, side by side in one run, interleaved: a fresh
database, a fresh processor, ``held`` attempts whose job span and step span start and never end,
a flush, then ordinary jobs of two steps timed until their flush returns (the writer's work
included). The ratio is of CPU time per job: the job's process and its writer process, so the
other work of a shared machine does not count; wall time and the garbage collector's time in
the job's process (a large live structure makes full collections longer) are shown beside it.

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
    fmt_ratio,
    job_attributes,
    median,
    own_cpu_s,
    run_jobs,
    verdict,
)

HELD = (0, 50_000, 60_000)  # attempts holding an open step: none, the bound, past it
TARGET_RATIO = 1.25
FLUSH_MS = 600_000


class _GcClock:
    """Seconds the collector ran in this process while ``running``, and its full collections
    (each walks every tracked object: the count does not depend on the machine's load)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self.running = False
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if not self.running:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started
            self.full += info["generation"] == 2


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


def _evictions(processor: JobStepsProcessor) -> int:
    """Spans and attempts the processor has forgotten at its bounds so far."""
    stats = processor.stats()
    return int(stats.get("evicted_spans", 0)) + int(stats.get("evicted_attempts", 0))


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
        gc_clock.seconds, gc_clock.full, gc_clock.running = 0.0, 0, True
        evicted = _evictions(processor)
        started, cpu = time.perf_counter(), own_cpu_s()
        run_jobs(tracer, prefix, jobs, steps=2, events=1)
        flushed = processor.force_flush(FLUSH_MS)
        elapsed, cpu = time.perf_counter() - started, own_cpu_s() - cpu
        gc_clock.running = False
        evicted = _evictions(processor) - evicted
        steps, logs = count_closed_steps(dsn, prefix)
        del kept
        return {
            "per_job": elapsed / jobs,
            "cpu_per_job": cpu / jobs,
            "gc_s": gc_clock.seconds,
            "full_gcs": gc_clock.full,
            "evicted": evicted,
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


def _medians(runs: list[dict[str, Any]]) -> tuple[float, float, float, float]:
    """Median CPU and wall seconds per job, gc seconds and full collections, of ``runs``."""
    cpu, wall, gc_s, full = (
        median([run[key] for run in runs]) for key in ("cpu_per_job", "per_job", "gc_s", "full_gcs")
    )
    return cpu, wall, gc_s, full


def rows(results: dict[str, dict[int, Any]], jobs: int) -> list[Row]:
    out: list[Row] = []
    for writer, by_held in results.items():
        base = _medians(by_held[0])
        for held in HELD[1:]:
            runs = by_held[held]
            cpu, wall, gc_s, full = _medians(runs)
            ratio = cpu / base[0]
            ok = ratio <= TARGET_RATIO and all(run["verified"] for run in runs)
            out.append(
                Row(
                    "22",
                    f"CPU per two-step job beside {held:,} attempts holding open spans"
                    f" ({writer} writer; wall {wall / base[1]:.2f}x, gc {gc_s:.2f} s,"
                    f" {full:g} full collections vs {base[3]:g},"
                    f" {median([run['evicted'] for run in runs]) / jobs:.2f} evictions per job)",
                    f"{cpu * 1e6:.0f} us",
                    f"{base[0] * 1e6:.0f} us beside none",
                    fmt_ratio(ratio),
                    f"<= {TARGET_RATIO}x",
                    verdict(ok),
                )
            )
    return out


def run(dbs: Databases, *, quick: bool) -> list[Row]:
    jobs, repetitions = (2_000, 1) if quick else (10_000, 3)
    return rows(measure(dbs, jobs=jobs, repetitions=repetitions), jobs)
