"""Target 3: time from a step's end to its row being visible closed, under light load.

Jobs (3 steps, 2 progress events each) are paced at a fixed step rate. A separate process (so it
takes no GIL time from the job) polls the table about every millisecond and notes, for each STEP
row, when it first saw it closed; the latency is that moment minus the row's ended_at, which is
the span's own end time (same machine, same wall clock).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import psycopg
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import set_span_in_context

from otel_jobsteps import JOB_STEP_KEY, JobStepsProcessor

from .common import STEP_KEYS, Databases, Row, job_attributes, server, verdict

PREFIX = "lat"
POLL_QUERY = """
SELECT id, extract(epoch FROM ended_at)::float8
FROM job_event
WHERE id > %s AND type = 'STEP' AND job_id LIKE 'lat-%%'
ORDER BY id
"""


def poll(dsn: str, expect: int, timeout_s: float) -> None:
    """The poller process: prints a JSON list of latencies (seconds) when all rows are seen."""
    latencies: list[float] = []
    open_ids: set[int] = set()
    low = 0  # every row with an id at or below this was seen closed
    highest = 0
    deadline = time.time() + timeout_s
    with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        print("ready", flush=True)
        while len(latencies) < expect and time.time() < deadline:
            cur.execute(POLL_QUERY, (low,))
            found = cur.fetchall()
            seen_at = time.time()
            for row_id, ended in found:
                if ended is None:
                    open_ids.add(row_id)
                elif row_id in open_ids or row_id > highest:
                    open_ids.discard(row_id)
                    latencies.append(seen_at - ended)
                highest = max(highest, row_id)
            low = min(open_ids) - 1 if open_ids else highest
            time.sleep(0.001)
    print(json.dumps(latencies), flush=True)


def measure(dsn: str, *, rate: float, seconds: float) -> dict[str, float]:
    steps = int(rate * seconds)
    poller = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.latency",
            "--poll",
            dsn,
            "--expect",
            str(steps),
            "--timeout",
            str(seconds + 30),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    processor = JobStepsProcessor(dsn)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("benchmarks.latency")
    try:
        assert poller.stdout is not None
        if poller.stdout.readline().strip() != "ready":
            raise RuntimeError("the latency poller did not start")
        started = time.perf_counter()
        job = None
        parent = None
        for number in range(steps):
            delay = started + number / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            if number % 3 == 0:
                job = tracer.start_span("job", attributes=job_attributes(f"{PREFIX}-{number // 3}"))
                parent = set_span_in_context(job)
            key = STEP_KEYS[number % 3]
            span = tracer.start_span(key, context=parent, attributes={JOB_STEP_KEY: key})
            span.add_event("progress", {"done": 1})
            span.add_event("progress", {"done": 2})
            span.end()
            if number % 3 == 2 and job is not None:
                job.end()
        if job is not None and job.is_recording():
            job.end()
        achieved = steps / (time.perf_counter() - started)
        processor.force_flush(30_000)
        output, _ = poller.communicate(timeout=60)
    finally:
        provider.shutdown()
        if poller.poll() is None:
            poller.kill()
            poller.wait()
    latencies: list[float] = sorted(json.loads(output.strip().splitlines()[-1]))
    if not latencies:
        return {"steps": steps, "seen": 0, "rate": achieved}

    def percentile(fraction: float) -> float:
        return latencies[min(len(latencies) - 1, int(fraction * len(latencies)))]

    return {
        "steps": steps,
        "seen": len(latencies),
        "rate": achieved,
        "p50": percentile(0.50),
        "p99": percentile(0.99),
        "max": latencies[-1],
    }


def rows(result: dict[str, float], rate: float) -> list[Row]:
    if not result.get("seen"):
        return [Row("3", "step end -> row closed", "no rows seen", verdict="FAIL")]
    ms = 1000.0
    seen = f"{int(result['seen']):,}/{int(result['steps']):,} steps at {result['rate']:.0f}/s"
    complete = result["seen"] == result["steps"]
    return [
        Row(
            "3",
            f"step end -> row closed, p50 ({rate:.0f} steps/s)",
            f"{result['p50'] * ms:.1f} ms",
            seen,
        ),
        Row(
            "3",
            "step end -> row closed, p99",
            f"{result['p99'] * ms:.1f} ms",
            f"max {result['max'] * ms:.1f} ms",
            "",
            "< 100 ms",
            verdict(result["p99"] < 0.1 and complete),
        ),
    ]


def run(dbs: Databases, *, quick: bool) -> list[Row]:
    rate, seconds = 500.0, (1.5 if quick else 6.0)
    dsn = dbs.fresh("latency")
    try:
        return rows(measure(dsn, rate=rate, seconds=seconds), rate)
    finally:
        dbs.drop(dsn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="loopback server DSN (default: embedded PostgreSQL)")
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--poll", metavar="DSN", help=argparse.SUPPRESS)
    parser.add_argument("--expect", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.poll:
        poll(args.poll, args.expect, args.timeout)
        return
    with server(args.dsn) as server_dsn:
        dbs = Databases(server_dsn)
        try:
            dsn = dbs.fresh("latency")
            for row in rows(measure(dsn, rate=args.rate, seconds=args.seconds), args.rate):
                print(row.measure, row.value, row.compared, row.verdict)
        finally:
            dbs.close()


if __name__ == "__main__":
    main()
