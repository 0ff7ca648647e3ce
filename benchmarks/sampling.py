"""RecordJobsSampler: what it costs on the application thread (issue 37 item 3).

Two questions, each side by side in one process, repetitions interleaved in shuffled order,
medians compared, wall time (perf_counter) and the thread's CPU time (thread_time):

- an unsampled job: jobs of 3 steps x 3 progress events recorded by our processor (on a live
  database, its writer running) under ``RecordJobsSampler(ParentBased(TraceIdRatioBased(0)))``
  against the same jobs under ALWAYS_ON (recorded and sampled): target <= 1.10x;
- spans outside jobs: a request span with two child spans under the same sampler, against the
  plain ``ParentBased(TraceIdRatioBased(0))`` it wraps: both drop them (the sampler's own test
  of the span is what is measured), reported beside the dialects' <= 1.05x for such spans.

No exporter is added: an exporter would cost ALWAYS_ON more and flatter the ratio.
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import Tracer, set_span_in_context

from otel_jobsteps import JobStepsProcessor, RecordJobsSampler

from .common import Databases, Row, fmt_ratio, medians, run_jobs, verdict

STEPS, EVENTS = 3, 3
REQUEST_ATTRIBUTES = {"http.request.method": "GET", "url.path": "/thumbnails/42"}


def _time(work: Callable[[], int]) -> tuple[float, float]:
    """(wall, thread CPU) seconds per unit of ``work`` (which returns its unit count)."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.thread_time()
    units = work()
    return (time.perf_counter() - wall) / units, (time.thread_time() - cpu) / units


def _requests(tracer: Tracer, count: int) -> int:
    """``count`` request spans outside any job, each with two children; returns ``count``."""
    for _ in range(count):
        request = tracer.start_span("GET /thumbnails", attributes=REQUEST_ATTRIBUTES)
        parent = set_span_in_context(request)
        tracer.start_span("SELECT", context=parent, attributes={"db.system": "postgresql"}).end()
        tracer.start_span("GET", context=parent, attributes={"http.request.method": "GET"}).end()
        request.end()
    return count


def measure(dsn: str, *, repetitions: int, jobs: int) -> dict[str, dict[str, float]]:
    """Median wall and CPU seconds per job (``job/*``) and per request (``outside/*``)."""
    samplers: dict[str, Sampler] = {
        "always_on": ALWAYS_ON,
        "root": ParentBased(TraceIdRatioBased(0.0)),
        "ours": RecordJobsSampler(ParentBased(TraceIdRatioBased(0.0))),
    }
    providers = {}
    for name, sampler in samplers.items():
        providers[name] = TracerProvider(sampler=sampler)
        providers[name].add_span_processor(JobStepsProcessor(dsn))
    tracers = {
        name: provider.get_tracer("benchmarks.sampling") for name, provider in providers.items()
    }
    cases: dict[str, Callable[[int], int]] = {
        "job/always_on": lambda n: (
            run_jobs(tracers["always_on"], f"on{n}", jobs, steps=STEPS, events=EVENTS) // STEPS
        ),
        "job/ours": lambda n: (
            run_jobs(tracers["ours"], f"ours{n}", jobs, steps=STEPS, events=EVENTS) // STEPS
        ),
        "outside/root": lambda n: _requests(tracers["root"], jobs),
        "outside/ours": lambda n: _requests(tracers["ours"], jobs),
    }
    samples: dict[str, dict[str, list[float]]] = {name: {"wall": [], "cpu": []} for name in cases}
    order = list(cases)
    shuffler = random.Random(37)
    try:
        for name in order:  # warm-up: imports, the writers' connections, caches
            cases[name](-1)
        for provider in providers.values():
            provider.force_flush(60_000)
        for repetition in range(repetitions):
            shuffler.shuffle(order)
            for name in order:
                wall, cpu = _time(lambda: cases[name](repetition))  # noqa: B023 - called here
                samples[name]["wall"].append(wall)
                samples[name]["cpu"].append(cpu)
                for provider in providers.values():  # untimed: no spill into the next case
                    provider.force_flush(60_000)
    finally:
        for provider in providers.values():
            provider.shutdown()
    return medians(samples)


# (measure, ours, compared with, its label, target, whether the target is this benchmark's)
_COMPARISONS = (
    ("unsampled job (3 steps x 3 events)", "job/ours", "job/always_on", "ALWAYS_ON", 1.10, True),
    (
        "request + 2 spans outside jobs, dropped",
        "outside/ours",
        "outside/root",
        "its root",
        1.05,
        False,
    ),
)


_LABELS = {"cpu": "app-thread CPU", "wall": "wall"}


def rows(result: dict[str, dict[str, float]], repetitions: int, jobs: int) -> list[Row]:
    us = 1e6
    out = []
    for measure, ours, other, label, target, decides in _COMPARISONS:
        for kind in ("cpu", "wall"):
            mine, theirs = result[ours][kind], result[other][kind]
            ratio = mine / theirs
            out.append(
                Row(
                    "37",
                    f"{measure}, RecordJobsSampler ({_LABELS[kind]})",
                    f"{mine * us:.1f} us",
                    f"{label} {theirs * us:.1f} us, median of {repetitions} x {jobs}",
                    fmt_ratio(ratio),
                    f"<= {target:.2f}x",
                    verdict(ratio <= target) if decides else "info",
                )
            )
    return out


def run(dbs: Databases, *, quick: bool) -> list[Row]:
    repetitions, jobs = (7, 300) if quick else (21, 2000)
    # Its database is dropped with the others at dbs.close().
    return rows(
        measure(dbs.fresh("sampling"), repetitions=repetitions, jobs=jobs), repetitions, jobs
    )
