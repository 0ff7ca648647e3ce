"""OTLP ingest (``otel-jobsteps collect``): spans per second into verified rows, request latency
at a steady rate, and memory while the database is away.

One ``collect`` process per measurement, started from the command line as a user would. The
requests are encoded before the clock starts, by the OpenTelemetry exporter's own encoder: jobs
of one job span and nine step spans (three progress events each), whole traces, 1,000 spans per
request; the same bodies go over OTLP/HTTP and over OTLP/gRPC (as the message of a unary
``TraceService/Export`` call). "Decode alone" parses the same bodies into span facts in this
process, in the same run: the ceiling the receiver's database work is compared with. Rows are
counted afterwards: a span that did not become its row does not count; beside the rate, the CPU
time per span of collect's processes and of PostgreSQL's. One client sending one-job requests
(I7) shows what a request costs whatever its size. Log records (I5) go the
same way: 1,000-record ``ExportLogsServiceRequest`` bodies of jobs whose spans were sent first,
each record an INFO line in a step's context, counted as LOG rows afterwards.
"""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import grpc
import httpx
import psycopg
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context

from otel_jobsteps._ingest.decode import decode_protobuf
from otel_jobsteps._ingest.logs import decode_logs_protobuf
from otel_jobsteps.attributes import JOB_STEP_KEY

from .common import (
    Databases,
    Row,
    closed_port_dsn,
    count_closed_steps,
    fmt_rate,
    fmt_ratio,
    free_port,
    job_attributes,
    median,
    processes,
    run_jobs,
    verdict,
)

SPANS_PER_REQUEST = 1_000
STEPS_PER_JOB = 9
SPANS_PER_JOB = STEPS_PER_JOB + 1
HEADERS = {"content-type": "application/x-protobuf"}
TARGET_SPANS_S = 25_000
TARGET_RATIO = 0.5
LATENCY_RATE = 5_000  # spans/s
LATENCY_SPANS_PER_REQUEST = 100
TARGET_P99_S = 0.050
MiB = 2**20
HISTORY_ATTEMPTS = 20
HISTORY_SPANS = 9_000  # staged behind those attempts
TARGET_HISTORY_RATIO = 2.0
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
LOGS_PER_STEP = 11  # with 9 steps: 99 log records a job, ~1,000 (10 jobs) a request
LOG_JOBS_PER_REQUEST = 10
TARGET_LOGS_S = 10_000  # issue 23's end-to-end figure for log lines into rows


def encoded_requests(
    prefix: str, requests: int, spans_per_request: int, *, steps: int = STEPS_PER_JOB
) -> list[bytes]:
    """Protobuf ``ExportTraceServiceRequest`` bodies of whole jobs of ``steps`` step spans,
    job ids ``prefix-N``."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    jobs_per_request = spans_per_request // (steps + 1)
    bodies = []
    for number in range(requests):
        exporter.clear()
        run_jobs(tracer, f"{prefix}-{number}", jobs_per_request, steps=steps)
        bodies.append(encode_spans(exporter.get_finished_spans()).SerializeToString())
    provider.shutdown()
    return bodies


class Receiver(NamedTuple):
    url: str  # OTLP/HTTP's /v1/traces
    grpc_target: str  # OTLP/gRPC's HOST:PORT
    pid: int


@contextmanager
def collect(dsn: str, *options: str) -> Iterator[Receiver]:
    """A running ``otel-jobsteps collect``; stopped after."""
    port, grpc_port = free_port(), free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_jobsteps.cli", "collect", "--dsn", dsn,
         "--listen", f"127.0.0.1:{port}", "--grpc-listen", f"127.0.0.1:{grpc_port}",
         "--retry-after", "1", *options],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1/traces"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.post(url, content=b"", headers=HEADERS, timeout=2).status_code in (
                    200,
                    503,
                ):
                    break  # it answers (503: as it should while the database is away)
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("collect did not start")
            time.sleep(0.05)
        yield Receiver(url, f"127.0.0.1:{grpc_port}", process.pid)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


Send = Callable[[Receiver, list[bytes], int], list[int]]


def _post_all(receiver: Receiver, bodies: list[bytes], clients: int) -> list[int]:
    """Send every body over HTTP, ``clients`` keep-alive connections at once; their status
    codes. The standard library's client: the load shares the two cores with what it
    measures, and httpx took 5-10 us of them per span (http.client under 1)."""
    url = urllib.parse.urlsplit(receiver.url)

    def client(next_body: Callable[[], bytes | None], answered: Callable[[int], None]) -> None:
        connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=120)
        try:
            while (body := next_body()) is not None:
                answered(_post(connection, url.path, body))
        finally:
            connection.close()

    return _in_parallel(client, bodies, clients)


def _post(connection: http.client.HTTPConnection, path: str, body: bytes) -> int:
    """POST ``body``; its status. A connection the server closed is opened again once."""
    for last in (False, True):
        try:
            connection.request("POST", path, body, HEADERS)
            response = connection.getresponse()
            response.read()
            return response.status
        except (http.client.RemoteDisconnected, ConnectionError):
            connection.close()
            if last:
                raise
    raise AssertionError("unreachable")


def _export_all(receiver: Receiver, bodies: list[bytes], clients: int) -> list[int]:
    """Send every body over gRPC, ``clients`` channels at once; their status codes as HTTP's
    (200 for OK)."""

    def client(next_body: Callable[[], bytes | None], answered: Callable[[int], None]) -> None:
        # Its own connection (grpc shares one between channels by default), as HTTP's clients.
        own = [("grpc.use_local_subchannel_pool", 1)]
        with grpc.insecure_channel(receiver.grpc_target, options=own) as channel:
            export = channel.unary_unary(EXPORT)  # the bodies as they are: no re-encoding
            while (body := next_body()) is not None:
                try:
                    export(body, timeout=120)
                    answered(200)
                except grpc.RpcError as error:
                    answered(500 + error.code().value[0])

    return _in_parallel(client, bodies, clients)


def _in_parallel(
    client: Callable[[Callable[[], bytes | None], Callable[[int], None]], None],
    bodies: list[bytes],
    clients: int,
) -> list[int]:
    """``clients`` threads running ``client`` over one queue of ``bodies``; the answers."""
    statuses: list[int] = []
    lock = threading.Lock()
    work = iter(bodies)

    def next_body() -> bytes | None:
        with lock:
            return next(work, None)

    def answered(code: int) -> None:
        with lock:
            statuses.append(code)

    threads = [threading.Thread(target=client, args=(next_body, answered)) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def throughput(dbs: Databases, *, quick: bool) -> list[Row]:
    requests = 8 if quick else 40
    bodies = encoded_requests("otlp", requests, SPANS_PER_REQUEST)
    spans = requests * SPANS_PER_REQUEST
    started = time.perf_counter()
    for body in bodies:
        decode_protobuf(body)
    decode_rate = spans / (time.perf_counter() - started)
    rows = []
    for protocol, send in (("HTTP", _post_all), ("gRPC", _export_all)):
        for workers in (1, 2):
            rate, cpu = _rows_per_second(dbs, bodies, workers, send)
            rows.append(_throughput_row(protocol, workers, rate, decode_rate, cpu))
    return rows


def _throughput_row(
    protocol: str, workers: int, rate: float, decode_rate: float, cpu: CpuPerSpan
) -> Row:
    ratio = rate / decode_rate
    return Row(
        "I1",
        f"collect --workers {workers}: spans/s into verified rows over OTLP/{protocol} "
        "(1,000-span protobuf requests, 4 clients)",
        fmt_rate(rate, "spans/s"),
        f"decode alone {fmt_rate(decode_rate, 'spans/s')}; CPU per span: collect "
        f"{cpu.collect:.0f} us, PostgreSQL {cpu.postgres:.0f} us",
        fmt_ratio(ratio),
        f">= {TARGET_SPANS_S:,} and >= {TARGET_RATIO}x",
        verdict(rate >= TARGET_SPANS_S and ratio >= TARGET_RATIO),
    )


class CpuPerSpan(NamedTuple):
    """CPU time per span, in microseconds: of collect (all its processes) and of PostgreSQL
    (all the server's processes)."""

    collect: float
    postgres: float


def _rows_per_second(
    dbs: Databases, bodies: list[bytes], workers: int, send: Send
) -> tuple[float, CpuPerSpan]:
    """Spans/s from the first byte sent to the last answer, 0 unless every row is there, and
    the CPU time the spans took."""
    dsn = dbs.fresh("ingest")
    try:
        with collect(dsn, "--workers", str(workers)) as receiver:
            send(receiver, bodies[:workers], workers)  # warm: connections, caches
            cpu_before = _cpu_s(receiver.pid)
            started = time.perf_counter()
            statuses = send(receiver, bodies[workers:], 4)
            elapsed = time.perf_counter() - started
            cpu_after = _cpu_s(receiver.pid)
        steps, logs = count_closed_steps(dsn, "otlp")
    finally:
        dbs.drop(dsn)
    jobs = len(bodies) * SPANS_PER_REQUEST // SPANS_PER_JOB
    sent = len(bodies) - workers
    complete = statuses.count(200) == sent and (steps, logs) == (jobs * STEPS_PER_JOB, jobs)
    spans = sent * SPANS_PER_REQUEST
    cpu = CpuPerSpan(*((a - b) / spans * 1e6 for a, b in zip(cpu_after, cpu_before, strict=True)))
    return (spans / elapsed if complete else 0.0), cpu


def _cpu_s(pid: int) -> tuple[float, float]:
    """CPU seconds so far of the process ``pid`` with its children, and of every PostgreSQL
    process on this machine (user and system time, from /proc)."""
    ours = postgres = 0.0
    for each, name, parent, seconds in processes():
        if name.startswith("postgres"):
            postgres += seconds
        elif pid in (each, parent):  # itself, a worker
            ours += seconds
    return ours, postgres


def latency(dbs: Databases, *, quick: bool) -> list[Row]:
    seconds = 4 if quick else 20
    per_second = LATENCY_RATE // LATENCY_SPANS_PER_REQUEST
    bodies = encoded_requests("lat", per_second * seconds, LATENCY_SPANS_PER_REQUEST)
    dsn = dbs.fresh("ingest_latency")
    latencies: list[float] = []
    try:
        with collect(dsn) as receiver, httpx.Client(timeout=30) as session:
            url = receiver.url
            session.post(url, content=b"", headers=HEADERS)
            start = time.perf_counter()
            for number, body in enumerate(bodies):
                due = start + number / per_second  # open loop: a slow answer delays no schedule
                pause = due - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                sent = time.perf_counter()
                if session.post(url, content=body, headers=HEADERS).status_code != 200:
                    raise RuntimeError("a paced request was refused")
                latencies.append(time.perf_counter() - sent)
    finally:
        dbs.drop(dsn)
    latencies.sort()
    p50 = latencies[len(latencies) // 2]
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return [
        Row(
            "I2",
            f"collect: request latency at a steady {LATENCY_RATE:,} spans/s "
            f"({LATENCY_SPANS_PER_REQUEST}-span requests), p99",
            f"{p99 * 1000:.1f} ms",
            f"p50 {p50 * 1000:.1f} ms",
            "",
            f"< {TARGET_P99_S * 1000:.0f} ms",
            verdict(p99 < TARGET_P99_S),
        )
    ]


def _running_jobs(prefix: str, steps: int) -> tuple[list[Span], list[list[Span]]]:
    """Start markers of ``HISTORY_ATTEMPTS`` running attempts (job spans not ended yet) and, per
    round, one more ended step span of each; ``steps`` rounds."""
    markers, rounds = [], [[] for _ in range(steps)]
    for number in range(HISTORY_ATTEMPTS):
        trace_id = os.urandom(16)
        job_span_id = os.urandom(8)
        started = time.time_ns()
        markers.append(otlp_span(trace_id, job_span_id, b"", started, 0,
                             job_attributes(f"{prefix}-{number}")))  # fmt: skip
        for step in range(steps):
            at = started + (step + 1) * 1000
            rounds[step].append(otlp_span(trace_id, os.urandom(8), job_span_id, at, at + 500,
                                      {JOB_STEP_KEY: f"S{step}"}))  # fmt: skip
    return markers, rounds


def otlp_span(
    trace_id: bytes, span_id: bytes, parent: bytes, start: int, end: int, names: dict[str, Any]
) -> Span:
    """A span as an exporter sends it, with int and text attributes (the logs benchmark's too)."""
    attributes = [
        KeyValue(key=k, value=AnyValue(int_value=v) if isinstance(v, int) else
                 AnyValue(string_value=str(v)))
        for k, v in names.items()
    ]  # fmt: skip
    return Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name="s",
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes=attributes,
    )


def _body(spans: list[Span]) -> bytes:
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])]
    )
    return request.SerializeToString()


def history_cost(dbs: Databases, *, quick: bool) -> list[Row]:
    """A request of one step span to each of 20 running attempts, with 9,000 spans staged
    behind them, against the same request to 20 fresh attempts, in one collect."""
    behind = HISTORY_SPANS // HISTORY_ATTEMPTS
    samples = 3 if quick else 7
    dsn = dbs.fresh("ingest_history")
    try:
        with collect(dsn) as receiver, httpx.Client(timeout=300) as session:
            url = receiver.url
            markers, rounds = _running_jobs("old", behind + samples)
            session.post(url, content=_body(markers), headers=HEADERS)
            for start in range(0, behind, 50):  # the history, 1,000 spans a request
                history = [span for r in rounds[start : start + 50] for span in r]
                session.post(url, content=_body(history), headers=HEADERS)

            def fresh_request(sample: int) -> bytes:
                new_markers, new_rounds = _running_jobs(f"new{sample}", 1)
                session.post(url, content=_body(new_markers), headers=HEADERS)
                return _body(new_rounds[0])

            old_bodies = [_body(rounds[behind + sample]) for sample in range(samples)]
            old, fresh = _old_against_fresh(session, url, old_bodies, fresh_request)
    finally:
        dbs.drop(dsn)
    what = (
        f"collect: a request of {HISTORY_ATTEMPTS} step spans to {HISTORY_ATTEMPTS} running "
        f"attempts with {HISTORY_SPANS:,} spans staged behind them (median)"
    )
    return [_history_row("I4", what, old, fresh)]


def _old_against_fresh(
    session: httpx.Client, url: str, old_bodies: list[bytes], fresh_request: Callable[[int], bytes]
) -> tuple[list[float], list[float]]:
    """Per sample, the request to the attempts with a history and the same to fresh attempts
    (``fresh_request`` sets them up), each timed."""
    old: list[float] = []
    fresh: list[float] = []
    for sample, old_body in enumerate(old_bodies):
        fresh_body = fresh_request(sample)
        for body, times in ((old_body, old), (fresh_body, fresh)):
            sent = time.perf_counter()
            if session.post(url, content=body, headers=HEADERS).status_code != 200:
                raise RuntimeError("a history request was refused")
            times.append(time.perf_counter() - sent)
    return old, fresh


def _history_row(code: str, what: str, old: list[float], fresh: list[float]) -> Row:
    ratio = median(old) / median(fresh)
    return Row(
        code,
        what,
        f"{median(old) * 1000:.1f} ms",
        f"same to fresh attempts {median(fresh) * 1000:.1f} ms",
        fmt_ratio(ratio),
        f"<= {TARGET_HISTORY_RATIO}x",
        verdict(ratio <= TARGET_HISTORY_RATIO),
    )


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_while_down(*, quick: bool) -> list[Row]:
    """Requests keep coming while the database is unreachable: all 503, RSS flat."""
    bodies = encoded_requests("down", 4, SPANS_PER_REQUEST)
    rounds = 4
    per_round = 50 if quick else 100
    samples: list[int] = []
    statuses: list[int] = []
    with collect(closed_port_dsn()) as receiver:
        _post_all(receiver, bodies, 2)  # warm-up
        samples.append(_rss(receiver.pid))
        for _ in range(rounds):
            statuses += _post_all(receiver, bodies * (per_round // len(bodies)), clients=4)
            samples.append(_rss(receiver.pid))
    growth = (samples[-1] - samples[0]) / MiB
    last = (samples[-1] - samples[-2]) / MiB
    refused = set(statuses) <= {503, 429}
    return [
        Row(
            "I3",
            f"collect: RSS growth over {len(statuses):,} requests while the database is down",
            f"{growth:+.1f} MiB",
            f"last quarter {last:+.1f} MiB, RSS {samples[-1] / MiB:.0f} MiB",
            "",
            "all 503/429, last quarter < 2 MiB",
            verdict(refused and last < 2),
        )
    ]


def encoded_logged_jobs(prefix: str, requests: int) -> tuple[list[bytes], list[bytes]]:
    """(span bodies, log bodies): ``requests`` of each, the log records of the jobs of the span
    request of the same number (INFO lines in their steps' contexts)."""
    spans, records = InMemorySpanExporter(), InMemoryLogRecordExporter()
    provider, logger_provider = TracerProvider(), LoggerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(records))
    tracer, logger = provider.get_tracer("bench"), logger_provider.get_logger("bench")
    span_bodies, log_bodies = [], []
    for number in range(requests):
        spans.clear()
        records.clear()
        for job_number in range(LOG_JOBS_PER_REQUEST):
            job_id = f"{prefix}-{number}-{job_number}"
            job = tracer.start_span("job", attributes=job_attributes(job_id))
            for index in range(STEPS_PER_JOB):
                key = f"S{index}"
                step = tracer.start_span(
                    key, context=set_span_in_context(job), attributes={JOB_STEP_KEY: key}
                )
                context = set_span_in_context(step)
                for line in range(LOGS_PER_STEP):
                    logger.emit(
                        timestamp=time.time_ns(),
                        context=context,
                        severity_number=SeverityNumber.INFO,
                        body=f"{key}: line {line} of {job_id}",
                        attributes={"line": line},
                    )
                step.end()
            job.end()
        span_bodies.append(encode_spans(spans.get_finished_spans()).SerializeToString())
        log_bodies.append(encode_logs(records.get_finished_logs()).SerializeToString())
    logger_provider.shutdown()
    provider.shutdown()
    return span_bodies, log_bodies


def log_throughput(dbs: Databases, *, quick: bool) -> list[Row]:
    """Log records/s into verified LOG rows over OTLP/HTTP, one worker, 4 clients, the jobs'
    spans received before; beside decoding the same log bodies alone."""
    requests = 4 if quick else 20
    span_bodies, log_bodies = encoded_logged_jobs("logs", requests)
    records = requests * LOG_JOBS_PER_REQUEST * STEPS_PER_JOB * LOGS_PER_STEP
    started = time.perf_counter()
    for body in log_bodies:
        decode_logs_protobuf(body)
    decode_rate = records / (time.perf_counter() - started)
    dsn = dbs.fresh("ingest_logs")
    try:
        with collect(dsn) as receiver:
            if set(_post_all(receiver, span_bodies, 4)) != {200}:
                raise RuntimeError("a span request was refused")
            logs = receiver._replace(url=receiver.url.replace("/v1/traces", "/v1/logs"))
            started = time.perf_counter()
            statuses = _post_all(logs, log_bodies, 4)
            elapsed = time.perf_counter() - started
        with psycopg.connect(dsn, autocommit=True) as conn:
            found = conn.execute(
                "SELECT count(*) FROM job_event WHERE type = 'LOG' AND job_id LIKE 'logs-%'"
            ).fetchone()
    finally:
        dbs.drop(dsn)
    complete = set(statuses) == {200} and found == (records,)
    rate = records / elapsed if complete else 0.0
    ratio = rate / decode_rate
    return [
        Row(
            "I5",
            "collect: log records/s into verified LOG rows over OTLP/HTTP (1,000-record "
            "protobuf requests after their jobs' spans, 4 clients, 1 worker)",
            fmt_rate(rate, "records/s"),
            f"decode alone {fmt_rate(decode_rate, 'records/s')}",
            fmt_ratio(ratio),
            f">= {TARGET_LOGS_S:,}",
            verdict(rate >= TARGET_LOGS_S),
        )
    ]


def _logged_attempts(prefix: str, rounds: int) -> tuple[bytes, list[bytes]]:
    """A span body of ``HISTORY_ATTEMPTS`` finished attempts (a job span and one long step
    each) and, per round, a log body of one INFO line in each attempt's step."""
    spans: list[Span] = []
    records: list[list[LogRecord]] = [[] for _ in range(rounds)]
    for number in range(HISTORY_ATTEMPTS):
        trace_id, job_span, step_span = os.urandom(16), os.urandom(8), os.urandom(8)
        started = time.time_ns()
        spans.append(otlp_span(trace_id, job_span, b"", started, started + 10**10,
                           job_attributes(f"{prefix}-{number}")))  # fmt: skip
        spans.append(otlp_span(trace_id, step_span, job_span, started + 1000, started + 9 * 10**9,
                           {JOB_STEP_KEY: "S0"}))  # fmt: skip
        for line in range(rounds):
            records[line].append(
                LogRecord(
                    trace_id=trace_id,
                    span_id=step_span,
                    time_unix_nano=started + 2000 + line,
                    severity_number=SeverityNumber.INFO.value,
                    body=AnyValue(string_value=f"line {line} of {prefix}-{number}"),
                )
            )
    return _body(spans), [_log_body(batch) for batch in records]


def _log_body(records: list[LogRecord]) -> bytes:
    request = ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=records)])]
    )
    return request.SerializeToString()


def log_history_cost(dbs: Databases, *, quick: bool) -> list[Row]:
    """A request of one log line to each of 20 attempts with 9,000 lines staged behind them,
    against the same request to 20 fresh attempts, in one collect."""
    behind = HISTORY_SPANS // HISTORY_ATTEMPTS
    samples = 3 if quick else 7
    dsn = dbs.fresh("ingest_log_history")
    try:
        with collect(dsn) as receiver, httpx.Client(timeout=300) as session:
            url = receiver.url
            logs_url = url.replace("/v1/traces", "/v1/logs")
            span_body, rounds = _logged_attempts("oldlog", behind + samples)
            session.post(url, content=span_body, headers=HEADERS)
            per_body = SPANS_PER_REQUEST // HISTORY_ATTEMPTS
            for start in range(0, behind, per_body):  # the history, 1,000 records a request
                history = ExportLogsServiceRequest()
                for body in rounds[start : start + per_body]:
                    history.MergeFromString(body)
                session.post(logs_url, content=history.SerializeToString(), headers=HEADERS)

            def fresh_request(sample: int) -> bytes:
                new_spans, new_rounds = _logged_attempts(f"newlog{sample}", 1)
                session.post(url, content=new_spans, headers=HEADERS)
                return new_rounds[0]

            old_bodies = [rounds[behind + sample] for sample in range(samples)]
            old, fresh = _old_against_fresh(session, logs_url, old_bodies, fresh_request)
    finally:
        dbs.drop(dsn)
    what = (
        f"collect: a request of {HISTORY_ATTEMPTS} log records to {HISTORY_ATTEMPTS} "
        f"attempts with {HISTORY_SPANS:,} records staged behind them (median)"
    )
    return [_history_row("I6", what, old, fresh)]


def small_requests(dbs: Databases, *, quick: bool) -> list[Row]:
    """One client sending requests of one job each (an exporter under light load): what a
    request costs whatever its size, in collect and in PostgreSQL."""
    requests = 200 if quick else 1_000
    bodies = encoded_requests("small", requests + 10, SPANS_PER_JOB)
    dsn = dbs.fresh("ingest_small")
    try:
        with collect(dsn) as receiver:
            _post_all(receiver, bodies[:10], 1)  # warm: the connection, prepared statements
            cpu_before = _cpu_s(receiver.pid)
            started = time.perf_counter()
            statuses = _post_all(receiver, bodies[10:], 1)
            elapsed = time.perf_counter() - started
            cpu_after = _cpu_s(receiver.pid)
        if set(statuses) != {200}:
            raise RuntimeError("a one-job request was refused")
    finally:
        dbs.drop(dsn)
    ours, postgres = (1000 * (a - b) / requests for a, b in zip(cpu_after, cpu_before, strict=True))
    return [
        Row(
            "I7",
            f"collect: one-job requests ({SPANS_PER_JOB} spans) per second from one client, "
            "and CPU per request",
            fmt_rate(requests / elapsed, "requests/s"),
            f"CPU per request: collect {ours:.2f} ms, PostgreSQL {postgres:.2f} ms",
        )
    ]


def run(dbs: Databases, *, quick: bool) -> list[Row]:
    return [
        *throughput(dbs, quick=quick),
        *small_requests(dbs, quick=quick),
        *log_throughput(dbs, quick=quick),
        *latency(dbs, quick=quick),
        *history_cost(dbs, quick=quick),
        *log_history_cost(dbs, quick=quick),
        *memory_while_down(quick=quick),
    ]
