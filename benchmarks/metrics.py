"""Issue 24: what the step metrics cost the writer thread, side by side with metrics off.

The throughput workload (jobs of 3 steps with 3 progress events each) runs through a processor
without a MeterProvider (the API's no-op: metrics off) and through one with an SDK MeterProvider
(every committed step recorded in the duration histogram, every attempt counted), interleaved;
the writer thread's own CPU time (Linux schedstat) per step is compared, medians of the runs.
Both write the same rows; the RETURNING of the guarded closes is paid in both. The same with
``writer="process"``: the job's process records on the thread reading the writer process's
replies, whose CPU is compared the same way (the replies carry the changes either way).

    python -m benchmarks.metrics [--dsn DSN] [--quick]
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path
from typing import Any
from unittest import mock

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JobStepsProcessor
from otel_jobsteps.metrics import Committed, StepMetrics

from .common import Databases, Row, median, run_jobs, server, verdict
from .throughput import verify

TARGET_RATIO = 1.05
# Where the step metrics are recorded: the writer thread, or (writer="process") the thread of
# the job's process that reads the writer process's replies.
RECORDING_THREAD = {"thread": "otel_jobsteps-writer", "process": "otel_jobsteps-relay-replies"}


def _cpu_ns(thread: threading.Thread) -> int:
    """CPU time the thread has run, in nanoseconds (the first field of its schedstat)."""
    stat = Path(f"/proc/self/task/{thread.native_id}/schedstat").read_text()
    return int(stat.split()[0])


def _recording_thread(writer: str) -> threading.Thread:
    name = RECORDING_THREAD[writer]
    (thread,) = [t for t in threading.enumerate() if t.name == name and t.is_alive()]
    return thread


def writer_cpu_once(
    dsn: str, jobs: int, prefix: str, *, metered: bool, writer: str = "thread"
) -> dict[str, Any]:
    """One run: the recording thread's CPU per step, and whether every row was written."""
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader]) if metered else None
    in_record = [0]  # CPU spent inside StepMetrics.record on the recording thread, ns
    original = StepMetrics.record

    def timed(self: StepMetrics, committed: Committed) -> None:
        started = time.thread_time_ns()
        original(self, committed)
        in_record[0] += time.thread_time_ns() - started

    with mock.patch.object(StepMetrics, "record", timed):
        processor = JobStepsProcessor(dsn, meter_provider=meters, writer=writer)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("benchmarks.metrics")
    try:
        run_jobs(tracer, prefix + "w", 20)
        processor.force_flush(30_000)
        recording = _recording_thread(writer)
        before = _cpu_ns(recording)
        steps = run_jobs(tracer, prefix, jobs)
        flushed = processor.force_flush(300_000)
        used = _cpu_ns(recording) - before
    finally:
        provider.shutdown()
    recorded = 0
    if meters is not None:
        data = reader.get_metrics_data()
        recorded = sum(
            int(getattr(point, "count", 0))
            for resource in (data.resource_metrics if data else ())
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == "otel_jobsteps.step.duration"
            for point in metric.data.data_points
        )
        meters.shutdown()
    return {
        "us_per_step": used / 1000 / steps,
        "record_us_per_step": in_record[0] / 1000 / steps,
        "ok": flushed,
        "recorded": recorded,
        "steps": steps,
    }


def measure(
    dbs: Databases, *, jobs: int, repetitions: int, writer: str = "thread"
) -> dict[str, Any]:
    result: dict[str, Any] = {"off": [], "on": [], "in_record": [], "verified": True}
    result["writer"] = writer
    dsn = dbs.fresh("metrics")
    try:
        for repetition in range(repetitions):
            for label in ("off", "on"):
                prefix = f"{label}{repetition}"
                run = writer_cpu_once(dsn, jobs, prefix, metered=label == "on", writer=writer)
                result["verified"] &= run["ok"] and verify(dsn, prefix, jobs)
                if label == "on":
                    result["verified"] &= run["recorded"] == run["steps"] + 3 * 20
                    result["in_record"].append(run["record_us_per_step"])
                result[label].append(run["us_per_step"])
    finally:
        dbs.drop(dsn)
    return result


def rows(result: dict[str, Any]) -> list[Row]:
    off, on = median(result["off"]), median(result["on"])
    ratio = on / off
    if result["writer"] == "thread":
        measure, target = "writer CPU per step, step metrics on (SDK MeterProvider) vs off", True
    else:  # the replies are read with metrics off too: the difference is the recording alone
        measure = "writer process: CPU per step of the job's reply thread, metrics on vs off"
        target = False
    in_record = median(result["in_record"])
    return [
        Row(
            "24",
            measure,
            f"{on:.1f} us/step",
            f"{off:.1f} us/step off",
            f"{ratio:.3f}x (+{on - off:.1f} us)",
            f"<= {TARGET_RATIO}x" if target else "",
            verdict(ratio <= TARGET_RATIO and result["verified"])
            if target
            else verdict(result["verified"])
            if not result["verified"]
            else "info",
        ),
        Row(
            "24",
            "  of which inside StepMetrics.record (thread CPU, same runs)",
            f"{in_record:.2f} us/step",
            f"{on:.1f} us/step on",
            f"{in_record / off:.1%} of off",
            f"<= {TARGET_RATIO - 1:.0%}" if target else "",
            verdict(in_record / off <= TARGET_RATIO - 1) if target else "info",
        ),
    ]


def run(dbs: Databases, *, quick: bool) -> list[Row]:
    jobs, repetitions = (2_000, 3) if quick else (10_000, 5)
    return [
        row
        for writer in ("thread", "process")
        for row in rows(measure(dbs, jobs=jobs, repetitions=repetitions, writer=writer))
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="loopback server DSN (default: embedded PostgreSQL)")
    parser.add_argument("--quick", action="store_true", help="smaller run")
    args = parser.parse_args()
    started = time.perf_counter()
    with server(args.dsn) as server_dsn:
        dbs = Databases(server_dsn)
        try:
            results = [
                measure(dbs, jobs=2_000 if args.quick else 10_000, repetitions=5, writer=writer)
                for writer in ("thread", "process")
            ]
        finally:
            dbs.close()
    for result in results:
        for row in rows(result):
            print(f"{row.measure}: {row.value} vs {row.compared} = {row.ratio} {row.verdict}")
        for label in ("off", "on", "in_record"):
            print(f"runs (us/step) {label}:", [f"{v:.2f}" for v in result[label]])
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
