"""Target 1: what each processor adds on the application thread per step span.

Five TracerProviders run the same loop (a step span started with a job span as parent, two
progress events, end), repetitions interleaved in shuffled order, medians compared: no
processor, BatchSpanProcessor with a discarding exporter (the issue's yardstick), the same with
the OTLP protobuf encoder (the CPU a real exporter spends before the network, in its own thread
as ours does), and ours pointed at a live database, with its writer thread (the default) and
with its writer process (``writer="process"``). Ours is timed while its writer runs (the
application thread shares the GIL with the writer or relay thread, which is part of what a job
pays); each repetition is followed by an untimed force_flush so no processor's background work
spills into another's timing. Wall time (perf_counter) decides; the thread's CPU time
(thread_time) is reported alongside.
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import set_span_in_context

from otel_jobsteps import JOB_STEP_KEY, JobStepsProcessor

from .common import STEP_KEYS, Databases, Row, fmt_ratio, job_attributes, medians, server, verdict


class DiscardingExporter(SpanExporter):
    """Accepts every batch and keeps nothing."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


class OtlpEncodingExporter(SpanExporter):
    """Encodes every batch as OTLP protobuf, as the OTLP exporters do, then drops it."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        encode_spans(spans).SerializeToString()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def _time_steps(provider: TracerProvider, job_id: str, steps: int) -> tuple[float, float]:
    """(wall, thread CPU) seconds per step for ``steps`` step spans inside one job span."""
    tracer = provider.get_tracer("benchmarks.hot_path")
    job = tracer.start_span("job", attributes=job_attributes(job_id))
    parent = set_span_in_context(job)
    keys = [(key, {JOB_STEP_KEY: key}) for key in STEP_KEYS]
    gc.collect()
    wall, cpu = time.perf_counter(), time.thread_time()
    for number in range(steps):
        name, attributes = keys[number % 3]
        span = tracer.start_span(name, context=parent, attributes=attributes)
        span.add_event("progress", {"done": 1})
        span.add_event("progress", {"done": 2})
        span.end()
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    job.end()
    provider.force_flush(60_000)
    return wall / steps, cpu / steps


def measure(dsn: str, *, repetitions: int, steps: int) -> dict[str, dict[str, float]]:
    """Median wall and CPU seconds per step for each variant."""
    providers: dict[str, TracerProvider] = {"none": TracerProvider()}
    providers["batch"] = TracerProvider()
    providers["batch"].add_span_processor(BatchSpanProcessor(DiscardingExporter()))
    providers["otlp"] = TracerProvider()
    providers["otlp"].add_span_processor(BatchSpanProcessor(OtlpEncodingExporter()))
    providers["ours"] = TracerProvider()
    providers["ours"].add_span_processor(JobStepsProcessor(dsn))
    providers["process"] = TracerProvider()
    providers["process"].add_span_processor(JobStepsProcessor(dsn, writer="process"))
    samples: dict[str, dict[str, list[float]]] = {
        name: {"wall": [], "cpu": []} for name in providers
    }
    order = list(providers)
    shuffler = random.Random(4)
    try:
        for name in order:  # warm-up: imports, the writer's connection, caches
            _time_steps(providers[name], f"hot-warm-{name}", 200)
        for repetition in range(repetitions):
            shuffler.shuffle(order)
            for name in order:
                wall, cpu = _time_steps(providers[name], f"hot-{name}-{repetition}", steps)
                samples[name]["wall"].append(wall)
                samples[name]["cpu"].append(cpu)
    finally:
        for provider in providers.values():
            provider.shutdown()
    return medians(samples)


def rows(result: dict[str, dict[str, float]], repetitions: int, steps: int) -> list[Row]:
    us = 1e6
    base, batch = result["none"], result["batch"]
    batch_added = (batch["wall"] - base["wall"]) * us
    otlp_added = (result["otlp"]["wall"] - base["wall"]) * us
    batch_cpu = (batch["cpu"] - base["cpu"]) * us
    note = f"median of {repetitions} x {steps} steps"
    out = [
        Row(
            "1",
            "step span (start, 2 events, end), no processor",
            f"{base['wall'] * us:.1f} us",
            note,
        ),
        Row("1", "added by BatchSpanProcessor (discarding)", f"{batch_added:.1f} us"),
    ]
    for name, label in (("ours", "ours"), ("process", "ours, writer process")):
        added = (result[name]["wall"] - base["wall"]) * us
        cpu = (result[name]["cpu"] - base["cpu"]) * us
        ratio = added / batch_added if batch_added > 0 else float("inf")
        cpu_ratio = cpu / batch_cpu if batch_cpu > 0 else float("inf")
        out += [
            Row(
                "1",
                f"added by {label} (wall, writer live)",
                f"{added:.1f} us",
                "BatchSpanProcessor",
                fmt_ratio(ratio),
                "<= 1.00x",
                verdict(ratio <= 1.0),
            ),
            Row(
                "1",
                f"added by {label} (wall) vs BatchSpanProcessor + OTLP encoding",
                f"{added:.1f} us",
                f"BatchSpanProcessor + OTLP {otlp_added:.1f} us",
                fmt_ratio(added / otlp_added if otlp_added > 0 else float("inf")),
                "<= 1.00x",
                "info",
            ),
            Row(
                "1",
                f"added by {label} (app-thread CPU time)",
                f"{cpu:.1f} us",
                f"BatchSpanProcessor {batch_cpu:.1f} us",
                fmt_ratio(cpu_ratio),
                "<= 1.00x",
                verdict(cpu_ratio <= 1.0),
            ),
        ]
    return out


def run(dbs: Databases, *, quick: bool) -> list[Row]:
    repetitions, steps = (7, 1000) if quick else (21, 3000)
    dsn = dbs.fresh("hot")
    try:
        return rows(measure(dsn, repetitions=repetitions, steps=steps), repetitions, steps)
    finally:
        dbs.drop(dsn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="loopback server DSN (default: embedded PostgreSQL)")
    parser.add_argument("--repetitions", type=int, default=21)
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args()
    with server(args.dsn) as server_dsn:
        dbs = Databases(server_dsn)
        try:
            dsn = dbs.fresh("hot")
            result = measure(dsn, repetitions=args.repetitions, steps=args.steps)
            for row in rows(result, args.repetitions, args.steps):
                print(f"{row.measure:50} {row.value:>10}  {row.ratio} {row.verdict}")
        finally:
            dbs.close()


if __name__ == "__main__":
    main()
