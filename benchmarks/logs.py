"""Issue 23: what a log record in a job scope costs the job's thread, and log lines per second.

Job thread: three LoggerProviders emit the same records (the Logs API, in a step span's
context): no processor, BatchLogRecordProcessor with a discarding exporter (the yardstick), and
ours pointed at a live database with its writer running. Repetitions interleaved in shuffled
order, medians compared, each followed by an untimed force_flush. Thread CPU time decides;
wall time is reported beside it. End to end: jobs whose steps log lines, from the first emit
until force_flush returns with every LOG row committed (counted in the database); the jobs wait
for a flush whenever half the queue is taken, so the rate is one the writer sustains. Run alone
with ``python -m benchmarks --only logs``.

Collect (issue 35): a request of 100 records to a step past its log cap, with 1,500 records of
that step staged behind it and with 200,000, side by side in one receiver (the history staged in
bulk by SQL, in the shape collect stores it): the request's time should not follow the history.
"""

from __future__ import annotations

import gc
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from opentelemetry._logs import SeverityNumber
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import set_span_in_context

from otel_jobsteps import JOB_STEP_KEY, JobStepsProcessor
from otel_jobsteps._ingest.decode import decode_protobuf
from otel_jobsteps._ingest.ids import signed
from otel_jobsteps._ingest.logs import decode_logs_protobuf
from otel_jobsteps._ingest.settings import CollectSettings
from otel_jobsteps._ingest.staging import Staging

from .common import (
    DOMAIN,
    Databases,
    Row,
    fmt_rate,
    fmt_ratio,
    job_attributes,
    median,
    medians,
    verdict,
)
from .ingest import otlp_span

TARGET_LINES_PER_S = 10_000
TARGET_CAP_RATIO = 1.5  # a request past the cap with 200,000 records behind it, vs 1,500
CHATTY_SENT = 1_500  # records of a chatty step sent through collect (the cap is 1,000)
CHATTY_REQUEST = 100  # records in each timed request
QUEUE_HALF = 25_000  # half the processor's default queue: above it the jobs wait for a flush


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
    step = tracer.start_span("step", set_span_in_context(job), attributes={JOB_STEP_KEY: "RENDER"})
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
    return medians(samples)


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
                step = tracer.start_span(
                    key.lower(), set_span_in_context(job), attributes={JOB_STEP_KEY: key}
                )
                context = set_span_in_context(step)
                for line in range(lines_per_step):
                    logger.emit(
                        context=context,
                        severity_number=SeverityNumber.INFO,
                        body=f"{key} line {line}",
                    )
                step.end()
            job.end()
            if processor.stats()["queued"] > QUEUE_HALF:  # sustained: the queue never fills
                processor.force_flush(300_000)
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


@dataclass
class ChattyStep:
    """One job in ``staging`` whose one step (CHAT) logged past its cap: ``behind`` records
    staged; its next records come at ``next_ns``, in the step's span."""

    staging: Staging
    job_id: str
    trace_id: bytes
    job_span: bytes
    step_span: bytes
    started_ns: int  # the job span's start
    next_ns: int

    def request(
        self, count: int = CHATTY_REQUEST, *, progress: bool = False
    ) -> ExportLogsServiceRequest:
        """The step's next ``count`` records, as an exporter sends them (``progress``: the last
        one a progress log event)."""
        records = [
            self.record(self.next_ns + n, f"line at {self.next_ns + n}") for n in range(count)
        ]
        if progress:
            records[-1].body.Clear()
            records[-1].event_name = "progress"
            records[-1].attributes.append(
                KeyValue(key="at", value=AnyValue(int_value=self.next_ns))
            )
        self.next_ns += count
        return ExportLogsServiceRequest(
            resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=records)])]
        )

    def end_step(self) -> None:
        """The step span's ended copy (of its start marker), ending after its last record."""
        step = otlp_span(self.trace_id, self.step_span, self.job_span, self.first_ns - 1000,
                     self.next_ns + 1000, {JOB_STEP_KEY: "CHAT"})  # fmt: skip
        body = ExportTraceServiceRequest(
            resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[step])])]
        )
        decoded = decode_protobuf(body.SerializeToString())
        self.staging.receive(decoded.spans, decoded.wire)

    @property
    def first_ns(self) -> int:
        return self.started_ns + 2000

    def send(self, request: ExportLogsServiceRequest) -> None:
        decoded = decode_logs_protobuf(request.SerializeToString())
        self.staging.receive_logs(decoded.logs, decoded.wire, decoded.keys)

    def record(self, time_ns: int, body: str) -> LogRecord:
        return LogRecord(
            trace_id=self.trace_id,
            span_id=self.step_span,
            time_unix_nano=time_ns,
            severity_number=SeverityNumber.INFO.value,
            severity_text="INFO",
            body=AnyValue(string_value=body),
        )


def chatty_step(
    staging: Staging, dsn: str, job_id: str, behind: int, *, running: bool
) -> ChattyStep:
    """A job whose step CHAT has ``behind`` records staged: the first `CHATTY_SENT` sent through
    ``staging`` in requests of 500, the rest inserted by SQL as collect stages them (copies of
    one record under keys of their own) and counted in the step's dropped-count row when the
    attempt has ended. ``running``: the job and step spans came as start markers only."""
    trace_id, job_span, step_span = os.urandom(16), os.urandom(8), os.urandom(8)
    started = time.time_ns()
    end = 0 if running else started + 10**12
    spans = [
        otlp_span(trace_id, job_span, b"", started, end, job_attributes(job_id)),
        otlp_span(trace_id, step_span, job_span, started + 1000, end and end - 1000,
              {JOB_STEP_KEY: "CHAT"}),
    ]  # fmt: skip
    body = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])]
    )
    decoded = decode_protobuf(body.SerializeToString())
    staging.receive(decoded.spans, decoded.wire)
    chatty = ChattyStep(staging, job_id, trace_id, job_span, step_span, started, started + 2000)
    sent = min(behind, CHATTY_SENT)
    for _ in range(0, sent, 500):
        chatty.send(chatty.request(min(500, sent)))
    bulk = behind - sent
    if bulk <= 0:
        return chatty
    copy = chatty.record(chatty.next_ns, "a line staged in bulk").SerializeToString()
    chatty.next_ns += 1
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO otlp_log (trace_id, span_id, key, seq, body, domain, job_id, attempt)"
            " SELECT %s, %s, decode(md5(%s || n), 'hex'), n, %s, %s, %s, 1"
            " FROM generate_series(1, %s) AS n",
            (trace_id.hex(), signed(int.from_bytes(step_span, "big")), job_id, copy, DOMAIN,
             job_id, bulk),
        )  # fmt: skip
        if not running:
            conn.execute(
                "UPDATE job_event SET detail = jsonb_set(detail, '{dropped}',"
                " to_jsonb((detail ->> 'dropped')::int + %s)),"
                " message = ((detail ->> 'dropped')::int + %s)::text || ' log lines dropped"
                " (over the cap of 1000 per step)'"
                " WHERE job_id = %s AND type = 'LOG' AND detail ? 'dropped'",
                (bulk, bulk, job_id),
            )
    return chatty


def measure_cap_history(dsn: str, *, samples: int, running: bool) -> dict[str, float]:
    """Median seconds of a request of `CHATTY_REQUEST` records to a step past its cap, with
    1,500 and with 200,000 records staged behind it (the two interleaved); to a running step,
    the last of them a progress log event, and then the step's end (its marker's ended copy:
    the job derived in full) timed once."""
    staging = Staging(CollectSettings(dsn, connections=1))
    kind = "running" if running else "ended"
    try:
        steps = {
            behind: chatty_step(staging, dsn, f"chatty-{kind}-{behind}", behind, running=running)
            for behind in (CHATTY_SENT, 200_000)
        }
        times: dict[str, list[float]] = {}
        for _ in range(samples):
            for behind, chatty in steps.items():
                request = chatty.request(progress=running)
                started = time.perf_counter()
                chatty.send(request)
                times.setdefault(f"lines {behind}", []).append(time.perf_counter() - started)
        for behind, chatty in steps.items() if running else ():
            started = time.perf_counter()
            chatty.end_step()
            times[f"end {behind}"] = [time.perf_counter() - started]
    finally:
        staging.close()
    return {what: median(found) for what, found in times.items()}


def cap_rows(found: dict[bool, dict[str, float]], samples: int) -> list[Row]:
    out = []
    for running, measured in found.items():
        few, many = measured[f"lines {CHATTY_SENT}"], measured["lines 200000"]
        ratio = many / few
        attempt = "running (start markers)" if running else "ended"
        out.append(
            Row(
                "35",
                f"collect: {CHATTY_REQUEST} records past the cap, 200,000 staged behind "
                f"({attempt} attempt, median of {samples})",
                f"{many * 1000:.1f} ms",
                f"{CHATTY_SENT:,} staged behind: {few * 1000:.1f} ms",
                fmt_ratio(ratio),
                f"<= {TARGET_CAP_RATIO:.2f}x",
                verdict(ratio <= TARGET_CAP_RATIO),
            )
        )
    if True in found:  # what is left: a span request that derives the job in full
        few, many = found[True][f"end {CHATTY_SENT}"], found[True]["end 200000"]
        out.append(
            Row(
                "35",
                "collect: that running step's end (its marker's ended copy, derived in full), "
                "200,000 staged behind",
                f"{many * 1000:.1f} ms",
                f"{CHATTY_SENT:,} staged behind: {few * 1000:.1f} ms",
                fmt_ratio(many / few),
            )
        )
    return out


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
        samples = 3 if quick else 7
        capped = {
            running: measure_cap_history(dsn, samples=samples, running=running)
            for running in (False, True)
        }
        return rows(result, rates, repetitions=repetitions, records=records) + cap_rows(
            capped, samples
        )
    finally:
        dbs.drop(dsn)
