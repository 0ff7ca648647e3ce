"""Issue 24: what the step metrics cost the writer thread, side by side with metrics off.

The throughput workload (jobs of 3 steps with 3 progress events each) runs through a processor
without a MeterProvider (the API's no-op: metrics off) and through one with an SDK MeterProvider
(every committed step recorded in the duration histogram, every attempt counted), interleaved;
the writer thread's own CPU time (Linux schedstat) per step is compared, medians of the runs.
Both write the same rows; the RETURNING of the guarded closes is paid in both.

    python -m benchmarks.metrics [--dsn DSN] [--quick]
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JobStepsProcessor

from .common import Databases, Row, median, run_jobs, server, verdict
from .throughput import verify

TARGET_RATIO = 1.05
WRITER_THREAD = "otel_jobsteps-writer"


def _cpu_ns(thread: threading.Thread) -> int:
    """CPU time the thread has run, in nanoseconds (the first field of its schedstat)."""
    stat = Path(f"/proc/self/task/{thread.native_id}/schedstat").read_text()
    return int(stat.split()[0])


def _writer_thread() -> threading.Thread:
    (thread,) = [t for t in threading.enumerate() if t.name == WRITER_THREAD and t.is_alive()]
    return thread


def writer_cpu_once(dsn: str, jobs: int, prefix: str, *, metered: bool) -> dict[str, Any]:
    """One run: the writer thread's CPU per step, and whether every row was written."""
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader]) if metered else None
    processor = JobStepsProcessor(dsn, meter_provider=meters)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("benchmarks.metrics")
    try:
        run_jobs(tracer, prefix + "w", 20)
        processor.force_flush(30_000)
        writer = _writer_thread()
        before = _cpu_ns(writer)
        steps = run_jobs(tracer, prefix, jobs)
        flushed = processor.force_flush(300_000)
        used = _cpu_ns(writer) - before
    finally:
        provider.shutdown()
    recorded = 0
    if meters is not None:
        data = reader.get_metrics_data()
        recorded = sum(
            point.count
            for resource in (data.resource_metrics if data else ())
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == "otel_jobsteps.step.duration"
            for point in metric.data.data_points
        )
        meters.shutdown()
    return {"us_per_step": used / 1000 / steps, "ok": flushed, "recorded": recorded, "steps": steps}


def measure(dbs: Databases, *, jobs: int, repetitions: int) -> dict[str, Any]:
    result: dict[str, Any] = {"off": [], "on": [], "verified": True}
    dsn = dbs.fresh("metrics")
    try:
        for repetition in range(repetitions):
            for label in ("off", "on"):
                prefix = f"{label}{repetition}"
                run = writer_cpu_once(dsn, jobs, prefix, metered=label == "on")
                result["verified"] &= run["ok"] and verify(dsn, prefix, jobs)
                if label == "on":
                    result["verified"] &= run["recorded"] == run["steps"] + 3 * 20
                result[label].append(run["us_per_step"])
    finally:
        dbs.drop(dsn)
    return result


def rows(result: dict[str, Any]) -> list[Row]:
    off, on = median(result["off"]), median(result["on"])
    ratio = on / off
    return [
        Row(
            "24",
            "writer CPU per step, step metrics on (SDK MeterProvider) vs off",
            f"{on:.1f} us/step",
            f"{off:.1f} us/step off",
            f"{ratio:.3f}x",
            f"<= {TARGET_RATIO}x",
            verdict(ratio <= TARGET_RATIO and result["verified"]),
        )
    ]


def run(dbs: Databases, *, quick: bool) -> list[Row]:
    jobs, repetitions = (2_000, 3) if quick else (10_000, 5)
    return rows(measure(dbs, jobs=jobs, repetitions=repetitions))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="loopback server DSN (default: embedded PostgreSQL)")
    parser.add_argument("--quick", action="store_true", help="smaller run")
    args = parser.parse_args()
    started = time.perf_counter()
    with server(args.dsn) as server_dsn:
        dbs = Databases(server_dsn)
        try:
            result = measure(dbs, jobs=2_000 if args.quick else 10_000, repetitions=5)
        finally:
            dbs.close()
    for row in rows(result):
        print(f"{row.measure}: {row.value} vs {row.compared} = {row.ratio} {row.verdict}")
    print("runs (us/step) off:", [f"{v:.1f}" for v in result["off"]])
    print("runs (us/step) on: ", [f"{v:.1f}" for v in result["on"]])
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
