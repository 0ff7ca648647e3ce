"""RecordJobsSampler: what it costs on the application thread (issue 37 item 3).

Two questions, each side by side in one process, repetitions interleaved in shuffled order,
medians compared, wall time (perf_counter) and the thread's CPU time (thread_time):

- an unsampled job: jobs of 3 steps x 3 progress events recorded by our processor (on a live
  database, its writer running) under ``RecordJobsSampler(ParentBased(TraceIdRatioBased(0)))``
  against the same jobs under ALWAYS_ON (recorded and sampled): target <= 1.10x;
- spans outside jobs: a request span with two child spans under the same sampler, against the
  plain ``ParentBased(TraceIdRatioBased(0))`` it wraps: both drop them (the sampler's own test
  of the span is what is measured), reported beside the dialects' <= 1.05x for such spans;
- the dialects on spans outside jobs (recorded, ALWAYS_ON): a SERVER request holding an
  INTERNAL span with a CLIENT span inside, then a CLIENT span, told to our processor with
  dialects ``all`` against ``none`` (today's cost): target <= 1.05x. Every span is asked
  whether a dialect may claim it, and every child whether one claims its parent now (DBOS).

No exporter is added: an exporter would cost ALWAYS_ON more and flatter the ratio.
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Tracer, set_span_in_context

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


def _kinds_of_requests(tracer: Tracer, count: int) -> int:
    """``count`` requests of four spans of three kinds outside any job; returns ``count``."""
    for _ in range(count):
        request = tracer.start_span(
            "GET /thumbnails", kind=SpanKind.SERVER, attributes=REQUEST_ATTRIBUTES
        )
        inside = set_span_in_context(request)
        render = tracer.start_span("render", context=inside)
        query = {"db.system": "postgresql"}
        tracer.start_span(
            "SELECT", context=set_span_in_context(render), kind=SpanKind.CLIENT, attributes=query
        ).end()
        render.end()
        call = {"http.request.method": "GET"}
        tracer.start_span("GET", context=inside, kind=SpanKind.CLIENT, attributes=call).end()
        request.end()
    return count


def measure(dsn: str, *, repetitions: int, jobs: int) -> dict[str, dict[str, float]]:
    """Median wall and CPU seconds per job (``job/*``) and per request (``outside/*``,
    ``dialects/*``)."""
    samplers: dict[str, Sampler] = {
        "always_on": ALWAYS_ON,
        "root": ParentBased(TraceIdRatioBased(0.0)),
        "ours": RecordJobsSampler(ParentBased(TraceIdRatioBased(0.0))),
    }
    providers = {}
    for name, sampler in samplers.items():
        providers[name] = TracerProvider(sampler=sampler)
        providers[name].add_span_processor(JobStepsProcessor(dsn))
    for selection in ("none", "all"):
        providers[selection] = TracerProvider(sampler=ALWAYS_ON)
        providers[selection].add_span_processor(JobStepsProcessor(dsn, dialects=selection))
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
        "dialects/none": lambda n: _kinds_of_requests(tracers["none"], jobs),
        "dialects/all": lambda n: _kinds_of_requests(tracers["all"], jobs),
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


# (measure, ours, compared with, its label, target, whether the target is this benchmark's,
# what is measured)
_COMPARISONS = (
    (
        "unsampled job (3 steps x 3 events)",
        "job/ours",
        "job/always_on",
        "ALWAYS_ON",
        1.10,
        True,
        "RecordJobsSampler",
    ),
    (
        "request + 2 spans outside jobs, dropped",
        "outside/ours",
        "outside/root",
        "its root",
        1.05,
        False,
        "RecordJobsSampler",
    ),
    (
        "request of 4 spans outside jobs, recorded",
        "dialects/all",
        "dialects/none",
        "dialects none",
        1.05,
        True,
        "dialects all",
    ),
)


_LABELS = {"cpu": "app-thread CPU", "wall": "wall"}


def rows(result: dict[str, dict[str, float]], repetitions: int, jobs: int) -> list[Row]:
    us = 1e6
    out = []
    for measure, ours, other, label, target, decides, what in _COMPARISONS:
        for kind in ("cpu", "wall"):
            mine, theirs = result[ours][kind], result[other][kind]
            ratio = mine / theirs
            out.append(
                Row(
                    "37",
                    f"{measure}, {what} ({_LABELS[kind]})",
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
