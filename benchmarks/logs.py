"""Issue 23: what a log record in a job scope costs the job's thread, and log lines per second.

Job thread: three LoggerProviders emit the same records (the Logs API, in a step span's
context): no processor, BatchLogRecordProcessor with a discarding exporter (the yardstick), and
ours pointed at a live database with its writer running. Repetitions interleaved in shuffled
order, medians compared, each followed by an untimed force_flush. Thread CPU time decides;
wall time is reported beside it. End to end: jobs whose steps log lines, from the first emit
until force_flush returns with every LOG row committed (counted in the database). Run alone
with ``python -m benchmarks --only logs``.
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Sequence

import psycopg
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import set_span_in_context

from otel_jobsteps import JOB_STEP_KEY, JobStepsProcessor

from .common import Databases, Row, fmt_rate, fmt_ratio, job_attributes, median, verdict

TARGET_LINES_PER_S = 10_000


class DiscardingLogExporter(LogRecordExporter):
    """Accepts every batch and keeps nothing."""

    def export(self, batch: Sequence[object]) -> LogRecordExportResult:  # type: ignore[override]
        return LogRecordExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def _time_records(
    tracers: TracerProvider, logs: LoggerProvider, job_id: str, records: int
) -> tuple[float, float]:
    """(wall, thread CPU) seconds per record for ``records`` INFO records in one step."""
    tracer = tracers.get_tracer("benchmarks.logs")
    logger = logs.get_logger("benchmarks.logs")
    job = tracer.start_span("job", attributes=job_attributes(job_id))
    step = tracer.start_span("step", set_span_in_context(job), {JOB_STEP_KEY: "RENDER"})
    context = set_span_in_context(step)
    info = SeverityNumber.INFO
    gc.collect()
    wall, cpu = time.perf_counter(), time.thread_time()
    for number in range(records):
        logger.emit(
            context=context,
            severity_number=info,
            severity_text="INFO",
            body="rendering frame",
            attributes={"frame": number},
        )
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    step.end()
    job.end()
    logs.force_flush(60_000)
    tracers.force_flush(60_000)
    return wall / records, cpu / records


def measure_job_thread(dsn: str, *, repetitions: int, records: int) -> dict[str, dict[str, float]]:
    """Median wall and CPU seconds per record for each variant."""
    variants: dict[str, tuple[TracerProvider, LoggerProvider]] = {}
    for name in ("none", "batch", "ours"):
        variants[name] = (TracerProvider(), LoggerProvider())
    # The cap keeps every record of the timed loops a LOG row written (none dropped).
    ours = JobStepsProcessor(dsn, logs_max_per_step=records + 1)
    variants["ours"][0].add_span_processor(ours)
    variants["ours"][1].add_log_record_processor(ours)
    variants["batch"][1].add_log_record_processor(BatchLogRecordProcessor(DiscardingLogExporter()))
    samples: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in variants}
    order = list(variants)
    shuffler = random.Random(23)
    try:
        for name in order:  # warm-up: imports, the writer's connection, caches
            _time_records(*variants[name], f"logs-warm-{name}", 200)
        for repetition in range(repetitions):
            shuffler.shuffle(order)
            for name in order:
                wall, cpu = _time_records(*variants[name], f"logs-{name}-{repetition}", records)
                samples[name]["wall"].append(wall)
                samples[name]["cpu"].append(cpu)
    finally:
        for tracers, logs in variants.values():
            logs.shutdown()
            tracers.shutdown()
    return {
        name: {kind: median(values) for kind, values in by_kind.items()}
        for name, by_kind in samples.items()
    }


def measure_end_to_end(dsn: str, *, jobs: int, lines_per_step: int, writer: str) -> float:
    """LOG rows per second from the first emit until force_flush has committed them all."""
    processor = JobStepsProcessor(dsn, writer=writer)
    tracers, logs = TracerProvider(), LoggerProvider()
    tracers.add_span_processor(processor)
    logs.add_log_record_processor(processor)
    tracer, logger = tracers.get_tracer("benchmarks.logs"), logs.get_logger("benchmarks.logs")
    prefix = f"logs-e2e-{writer}"
    try:
        started = time.perf_counter()
        for number in range(jobs):
            job = tracer.start_span("job", attributes=job_attributes(f"{prefix}-{number}"))
            for key in ("RENDER", "UPLOAD"):
                step = tracer.start_span(key.lower(), set_span_in_context(job), {JOB_STEP_KEY: key})
                context = set_span_in_context(step)
                for line in range(lines_per_step):
                    logger.emit(
                        context=context,
                        severity_number=SeverityNumber.INFO,
                        body=f"{key} line {line}",
                    )
                step.end()
            job.end()
        if not processor.force_flush(300_000):
            raise RuntimeError("force_flush timed out")
        elapsed = time.perf_counter() - started
    finally:
        logs.shutdown()
        tracers.shutdown()
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM job_event WHERE type = 'LOG' AND job_id LIKE %s",
            (prefix + "-%",),
        ).fetchone()
    written = int(row[0]) if row else 0
    expected = jobs * 2 * lines_per_step
    if written != expected:
        raise RuntimeError(f"{written} LOG rows written, {expected} expected")
    return written / elapsed


def rows(
    result: dict[str, dict[str, float]],
    rates: dict[str, float],
    *,
    repetitions: int,
    records: int,
) -> list[Row]:
    us = 1e6
    base, batch, ours = result["none"], result["batch"], result["ours"]
    batch_cpu, ours_cpu = (batch["cpu"] - base["cpu"]) * us, (ours["cpu"] - base["cpu"]) * us
    batch_wall, ours_wall = (batch["wall"] - base["wall"]) * us, (ours["wall"] - base["wall"]) * us
    ratio = ours_cpu / batch_cpu if batch_cpu > 0 else float("inf")
    wall_ratio = ours_wall / batch_wall if batch_wall > 0 else float("inf")
    out = [
        Row(
            "23",
            "log record in a step, no processor",
            f"{base['cpu'] * us:.2f} us",
            f"median of {repetitions} x {records} records",
        ),
        Row("23", "added by BatchLogRecordProcessor (discarding)", f"{batch_cpu:.2f} us"),
        Row(
            "23",
            "log record added by ours (job-thread CPU)",
            f"{ours_cpu:.2f} us",
            f"BatchLogRecordProcessor {batch_cpu:.2f} us",
            fmt_ratio(ratio),
            "<= 1.00x",
            verdict(ratio <= 1.0),
        ),
        Row(
            "23",
            "log record added by ours (wall, writer live)",
            f"{ours_wall:.2f} us",
            f"BatchLogRecordProcessor {batch_wall:.2f} us",
            fmt_ratio(wall_ratio),
            "<= 1.00x",
            "info",
        ),
    ]
    for writer, rate in rates.items():
        label = "writer thread" if writer == "thread" else "writer process"
        out.append(
            Row(
                "23",
                f"log lines into LOG rows, end to end ({label})",
                fmt_rate(rate, "lines/s"),
                "",
                "",
                f">= {TARGET_LINES_PER_S:,} lines/s",
                verdict(rate >= TARGET_LINES_PER_S),
            )
        )
    return out


def run(dbs: Databases, *, quick: bool) -> list[Row]:
    repetitions, records = (7, 1000) if quick else (21, 3000)
    jobs, lines = (20, 500) if quick else (100, 500)
    dsn = dbs.fresh("logs")
    try:
        result = measure_job_thread(dsn, repetitions=repetitions, records=records)
        rates = {
            writer: measure_end_to_end(dsn, jobs=jobs, lines_per_step=lines, writer=writer)
            for writer in ("thread", "process")
        }
        return rows(result, rates, repetitions=repetitions, records=records)
    finally:
        dbs.drop(dsn)
