"""Workloads to profile, and a reader for py-spy's raw output.

    py-spy record --gil --full-filenames -r 250 -f raw -o /tmp/throughput.raw -- \\
        python -m benchmarks.profile throughput --dsn DSN
    py-spy record --gil --full-filenames -r 250 -f raw -o /tmp/hot.raw -- \\
        python -m benchmarks.profile hot --dsn DSN
    python -m benchmarks.profile report /tmp/throughput.raw

``throughput`` runs our processor end to end (the target 2 workload) a few times; ``hot`` runs
step spans inside a job with our processor and a live writer, flushing now and then. ``report``
prints, per thread, where the samples went: by area (our modules, psycopg, the OTel SDK,
the rest), then the top functions by self and by inclusive samples. With ``--gil`` py-spy
samples only the thread holding the GIL, which is what the two threads compete for.

``threads`` needs no profiler: it runs the target 2 workload with no processor, then with
ours, and prints per step the wall time, the CPU time of the job thread and of the writer
thread, and the garbage collector's CPU time on each (py-spy cannot show collections: they
are charged to whatever frame allocated). The two threads share one GIL, so with a job that
never waits the wall time is about the sum of both threads' CPU.
"""

from __future__ import annotations

import argparse
import gc
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import set_span_in_context

from otel_jobsteps import JOB_STEP_KEY, JobStepsProcessor

from .common import STEP_KEYS, Databases, job_attributes, run_jobs, server, stat_cpu
from .throughput import ours_once

AREAS = (
    ("/otel_jobsteps/processor", "ours: processor hooks"),
    ("/otel_jobsteps/_live/spans", "ours: processor hooks"),
    ("/otel_jobsteps/_live/watch", "ours: span watch (queue items -> facts)"),
    ("/otel_jobsteps/_live/fields", "ours: span watch (queue items -> facts)"),
    ("/otel_jobsteps/_live/interpretation", "ours: span watch (queue items -> facts)"),
    ("/otel_jobsteps/_core/translate", "ours: translate (facts -> commands)"),
    ("/otel_jobsteps/_core/attempts", "ours: translate (facts -> commands)"),
    ("/otel_jobsteps/_core/recorder", "ours: recorder (commands -> rows)"),
    ("/otel_jobsteps/_core/steps", "ours: recorder (commands -> rows)"),
    ("/otel_jobsteps/_core/adjacent", "ours: recorder (commands -> rows)"),
    ("/otel_jobsteps/_core/batch", "ours: recorder (commands -> rows)"),
    ("/otel_jobsteps/_core/detail", "ours: detail encoding"),
    ("/otel_jobsteps/_live/writer", "ours: writer loop"),
    ("/otel_jobsteps/_live/background", "ours: writer loop"),
    ("/otel_jobsteps/_pg/store", "ours: store (parameters)"),
    ("/otel_jobsteps/_telemetry/", "ours: stats and metrics"),
    ("/otel_jobsteps/", "ours: other"),
    ("/psycopg", "psycopg"),
    ("/opentelemetry/", "OTel SDK/API"),
    ("/benchmarks/", "benchmark driver"),
)
OTHER = "stdlib/builtins"
ROOT = Path(__file__).resolve().parent.parent  # this checkout: stripped from frames' paths


def hot(dsn: str, seconds: float) -> None:
    processor = JobStepsProcessor(dsn)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("benchmarks.profile")
    keys = [(key, {JOB_STEP_KEY: key}) for key in STEP_KEYS]
    deadline = time.perf_counter() + seconds
    job_number = 0
    while time.perf_counter() < deadline:
        job = tracer.start_span("job", attributes=job_attributes(f"prof-{job_number}"))
        parent = set_span_in_context(job)
        for number in range(3000):
            name, attributes = keys[number % 3]
            span = tracer.start_span(name, context=parent, attributes=attributes)
            span.add_event("progress", {"done": 1})
            span.add_event("progress", {"done": 2})
            span.end()
        job.end()
        processor.force_flush(60_000)
        job_number += 1
    provider.shutdown()


def _thread_cpu_s(native_id: int) -> float:
    """CPU seconds (user + system) of one thread of this process, from /proc."""
    return stat_cpu(f"/proc/self/task/{native_id}/stat")[2]


class _CollectorClock:
    """Adds up the CPU time the garbage collector takes, per thread (job or writer)."""

    def __init__(self) -> None:
        self.seconds = {"job": 0.0, "writer": 0.0}
        self._started: dict[int, float] = {}

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        thread = threading.get_ident()
        if phase == "start":
            self._started[thread] = time.thread_time()
            return
        name = "writer" if threading.current_thread().name.startswith("otel_jobsteps-") else "job"
        self.seconds[name] += time.thread_time() - self._started.pop(thread, time.thread_time())


def threads(dsn: str, jobs: int) -> dict[str, float]:
    """Microseconds per step: wall and CPU, job and writer thread, and their GC share."""
    provider = TracerProvider()
    tracer = provider.get_tracer("benchmarks.profile")
    run_jobs(tracer, "sdk-w", 100)
    started, cpu = time.perf_counter(), time.thread_time()
    steps = run_jobs(tracer, "sdk", jobs)
    per_step = 1e6 / steps
    out = {
        "SDK alone: wall": (time.perf_counter() - started) * per_step,
        "SDK alone: job thread CPU": (time.thread_time() - cpu) * per_step,
    }
    processor = JobStepsProcessor(dsn)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("benchmarks.profile")
    run_jobs(tracer, "ours-w", 50)
    processor.force_flush(30_000)
    writer = next(t for t in threading.enumerate() if t.name == "otel_jobsteps-writer")
    assert writer.native_id is not None
    collector = _CollectorClock()
    gc.collect()
    gc.callbacks.append(collector)
    try:
        writer_cpu, cpu = _thread_cpu_s(writer.native_id), time.thread_time()
        started = time.perf_counter()
        run_jobs(tracer, "ours", jobs)
        job_cpu = time.thread_time() - cpu
        processor.force_flush(300_000)
        wall = time.perf_counter() - started
        writer_cpu = _thread_cpu_s(writer.native_id) - writer_cpu
    finally:
        gc.callbacks.remove(collector)
        provider.shutdown()
    out |= {
        "ours: wall, first span to flushed": wall * per_step,
        "ours: job thread CPU": job_cpu * per_step,
        "ours: of which garbage collection": collector.seconds["job"] * per_step,
        "ours: writer thread CPU": writer_cpu * per_step,
        "ours: of which garbage collection ": collector.seconds["writer"] * per_step,
    }
    return out


def _area(frame: str) -> str:
    for needle, area in AREAS:
        if needle in frame:
            return area
    return OTHER


def _sample_area(frames: list[str]) -> str:
    """The innermost frame that is not stdlib names the area; psycopg says who called it."""
    areas = [_area(frame) for frame in frames]
    known = [area for area in areas if area != OTHER]
    if not known:
        return OTHER
    if known[-1] == "psycopg":
        callers = [area for area in known if area.startswith("ours")]
        return f"psycopg (from {callers[-1]})" if callers else "psycopg"
    return known[-1]


def _short(frame: str) -> str:
    """``func (/long/path/site-packages/pkg/mod.py:12)`` -> ``func (pkg/mod.py:12)``."""
    name, _, where = frame.partition(" (")
    for marker in ("site-packages/", f"{ROOT}/"):
        if marker in where:
            where = where.split(marker, 1)[1]
    return f"{name} ({where}" if where else name


def report(path: str, top: int) -> None:
    """Summarise a py-spy ``--format raw`` file (collapsed stacks with counts)."""
    by_thread: dict[str, list[tuple[list[str], int]]] = defaultdict(list)
    with open(path, encoding="utf-8") as raw:
        for line in raw:
            stack, _, number = line.rstrip("\n").rpartition(" ")
            frames = stack.split(";")
            root = " ".join(frames[:2])
            thread = (
                "writer thread"
                if "writer" in root or "Thread._bootstrap" in root
                else ("application thread")
            )
            by_thread[thread].append((frames, int(number)))
    total = sum(count for stacks in by_thread.values() for _, count in stacks)
    print(f"{total} samples in {path}")
    for thread, stacks in sorted(by_thread.items(), key=lambda item: -sum(c for _, c in item[1])):
        samples = sum(count for _, count in stacks)
        print(f"\n## {thread}: {samples} samples ({100 * samples / total:.0f}% of all)")
        areas: Counter[str] = Counter()
        own: Counter[str] = Counter()
        inclusive: Counter[str] = Counter()
        for frames, count in stacks:
            areas[_sample_area(frames)] += count
            own[_short(frames[-1])] += count
            for frame in {_short(f) for f in frames}:
                inclusive[frame] += count
        print("by area (innermost non-stdlib frame):")
        for area, count in areas.most_common():
            print(f"  {100 * count / samples:5.1f}%  {area}")
        print("top self:")
        for frame, count in own.most_common(top):
            print(f"  {100 * count / samples:5.1f}%  {frame}")
        print("top inclusive (our code and psycopg):")
        shown = 0
        for frame, count in inclusive.most_common():
            if (
                frame.startswith(("otel_jobsteps/", "psycopg/"))
                or "(otel_jobsteps/" in frame
                or "(psycopg/" in frame
            ):
                print(f"  {100 * count / samples:5.1f}%  {frame}")
                shown += 1
                if shown >= top:
                    break


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("hot", "throughput", "threads", "report"))
    parser.add_argument("file", nargs="?", help="py-spy raw output (for report)")
    parser.add_argument("--dsn", help="loopback server DSN (default: embedded PostgreSQL)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--jobs", type=int, default=15_000)
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    if args.what == "report":
        if not args.file:
            parser.error("report needs the raw file")
        report(args.file, args.top)
        return
    with server(args.dsn) as server_dsn:
        dbs = Databases(server_dsn)
        try:
            if args.what == "hot":
                hot(dbs.fresh("profile"), args.seconds)
            elif args.what == "threads":
                for repetition in range(args.repetitions):
                    print(f"-- repetition {repetition + 1}, {args.jobs * 3:,} steps (us per step)")
                    for name, value in threads(dbs.fresh("profile"), args.jobs).items():
                        print(f"{name.strip():42} {value:7.1f}")
            else:
                for repetition in range(args.repetitions):
                    dsn = dbs.fresh("profile")
                    run = ours_once(dsn, args.jobs, f"prof{repetition}")
                    print(f"{run['rate']:,.0f} steps/s")
                    dbs.drop(dsn)
        finally:
            dbs.close()


if __name__ == "__main__":
    main()
