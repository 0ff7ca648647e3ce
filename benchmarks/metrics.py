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
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import psycopg
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from psycopg import sql
from starlette.testclient import TestClient

from otel_jobsteps import JobStepsProcessor
from otel_jobsteps._telemetry.metrics import Committed, StepMetrics
from otel_jobsteps.sql import load_queries, migrations
from otel_jobsteps.web import create_app

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
            # Alternating which goes first: a later run meets a bigger table, autovacuum.
            for label in ("off", "on") if repetition % 2 == 0 else ("on", "off"):
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
            f"{ratio:.3f}x ({on - off:+.1f} us)",
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
    found = [
        row
        for writer in ("thread", "process")
        for row in rows(measure(dbs, jobs=jobs, repetitions=repetitions, writer=writer))
    ]
    dsn = dbs.fresh("progress")
    try:
        return found + progress_write_cost(dsn, rounds=50 if quick else 200)
    finally:
        dbs.drop(dsn)


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


# job_event_open_gauges as migration 0013 builds it (the open steps with what the gauges read,
# so a scrape never visits the heap): dropped to measure the schema before 0013 side by side.
GAUGE_INDEX = next(
    statement
    for version, _, text in migrations()
    if version == 13
    for statement in text.split(";\n")
    if statement.startswith("CREATE INDEX IF NOT EXISTS job_event_open_gauges")
)
SCRAPE_TARGET_MS = 100.0
# An overdue limit (1 s) for each job type and step key of bigtable's fill: the scrape's join.
_KEYS = ("FETCH", "RENDER", "UPLOAD", "NOTIFY")
_FILLED = [(t, k) for t in ("thumbnail", "invoice", "export") for k in _KEYS]
FILL_LIMITS = {
    "job_types": [t for t, _ in _FILLED],
    "step_keys": [k for _, k in _FILLED],
    "seconds": [1.0] * len(_FILLED),
}


def _gauge_plan(conn: psycopg.Connection[Any]) -> str:
    """The scrape statement's plan, executed: its scan, heap blocks or fetches, buffers."""
    text = load_queries("web.sql")["open_step_gauges"].replace("{job_event}", "job_event")
    found = conn.execute(
        sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + text),
        {"silent_after": timedelta(minutes=5), **FILL_LIMITS},
    ).fetchone()
    plan = found[0][0]["Plan"] if found else {}

    def scan_of(node: dict[str, Any]) -> dict[str, Any]:
        """The node that reads the table (heap blocks or fetches), else the deepest."""
        if "Heap Fetches" in node or "Exact Heap Blocks" in node or not node.get("Plans"):
            return node
        return scan_of(node["Plans"][0])

    scan = scan_of(plan)
    kind = "Heap Fetches" if "Heap Fetches" in scan else "Exact Heap Blocks"
    # A parallel scan: the leader's count and each worker's.
    visited = scan.get(kind, 0) + sum(w.get(kind, 0) for w in scan.get("Workers", []))
    buffers = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
    target = scan.get("Index Name") or scan.get("Relation Name", "?")
    return f"{scan['Node Type']} on {target}: {visited} {kind.lower()}, {buffers} buffers"


def _scrape_ms(dsn: str, repeat: int) -> list[float]:
    """Server time of GET /metrics through serve's app in process, after two warm-ups."""
    times = []
    with TestClient(create_app(dsn)) as client:
        for run in range(repeat + 2):
            started = time.perf_counter()
            response = client.get("/metrics")
            if response.status_code != 200:
                raise RuntimeError(f"/metrics answered {response.status_code}")
            if run >= 2:
                times.append((time.perf_counter() - started) * 1000)
    return times


def scrape_rows(dsn: str, repeat: int) -> list[Row]:
    """/metrics on a filled table without job_event_open_gauges (the schema before migration
    0013), then as migrated, side by side."""
    found = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for label in ("before 0013 (no job_event_open_gauges)", "as migrated"):
            if label == "as migrated":
                conn.execute(GAUGE_INDEX)
            else:
                conn.execute("DROP INDEX job_event_open_gauges")
            conn.execute("VACUUM (ANALYZE) job_event")
            plan = _gauge_plan(conn)
            times = _scrape_ms(dsn, repeat)
            found.append((label, median(times), max(times), plan))
    base = found[0][1]
    return [
        Row(
            "24",
            f"GET /metrics, every open step, {label}; EXPLAIN: {plan}",
            f"{ms:.1f} ms median",
            f"max {slowest:.1f} ms",
            f"{ms / base:.2f}x",
            f"< {SCRAPE_TARGET_MS:.0f} ms",
            verdict(ms < SCRAPE_TARGET_MS),
        )
        for label, ms, slowest, plan in found
    ]


def progress_write_cost(dsn: str, *, open_steps: int = 500, rounds: int = 200) -> list[Row]:
    """What job_event_open_gauges costs the writer's progress writes: an UPDATE of detail and
    heartbeat_at of open rows by id, as write_progress did before 0013 (heartbeat_at = now(),
    no index) and as it does now (beside the index, heartbeat_at moved once the last sign of
    life is 15 s old), interleaved, on steps an hour old: database time and WAL per row, and
    the share of HOT updates."""
    results: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET jit = off")  # compiling a 500-row update would dwarf it
        for _ in range(3):
            for indexed in (False, True):
                results[indexed].append(_progress_round(conn, indexed, open_steps, rounds))
        conn.execute("DROP INDEX IF EXISTS job_event_open_gauges")
    (us_off, wal_off, hot_off), (us_on, wal_on, hot_on) = (
        tuple(median([r[i] for r in results[k]]) for i in range(3)) for k in (False, True)
    )
    return [
        Row(
            "24",
            f"progress write per open row as migrated vs before 0013 ({open_steps} open"
            f" steps; HOT updates {hot_on:.0%} vs {hot_off:.0%}; WAL {wal_on:.0f} vs"
            f" {wal_off:.0f} bytes)",
            f"{us_on:.1f} us",
            f"{us_off:.1f} us",
            f"{us_on / us_off:.2f}x",
            "",
            "info",
        )
    ]


PROGRESS_ROWS_SQL = """
INSERT INTO job_event (domain, job_id, job_type, attempt, type, step_key, step_status, detail,
                       created_at, ended_at)
SELECT 'bench', 'progress-' || n, 'thumbnail', 1, 'STEP', 'RENDER',
       CASE WHEN n %% 5 = 0 THEN 'RUNNING' ELSE 'COMPLETED' END, '{"done": 0}',
       now() - interval '1 hour',
       CASE WHEN n %% 5 = 0 THEN NULL ELSE now() END
FROM generate_series(1, %(rows)s) AS n
"""
PROGRESS_IDS_SQL = (
    "SELECT id FROM job_event WHERE job_id LIKE 'progress-%' AND type = 'STEP' AND ended_at IS NULL"
)
PROGRESS_SQL = {
    False: "UPDATE job_event SET detail = jsonb_build_object('done', %s::int),"
    " heartbeat_at = now() WHERE id = ANY(%s) AND ended_at IS NULL",
    True: "UPDATE job_event SET detail = jsonb_build_object('done', %s::int),"
    " heartbeat_at = CASE WHEN GREATEST(created_at, heartbeat_at) > now() - interval '15 s'"
    " THEN heartbeat_at ELSE now() END WHERE id = ANY(%s) AND ended_at IS NULL",
}
HOT_SQL = (
    "SELECT pg_stat_get_xact_tuples_hot_updated('job_event'::regclass),"
    " pg_stat_get_xact_tuples_updated('job_event'::regclass)"
)


def _progress_round(
    conn: psycopg.Connection[Any], indexed: bool, open_steps: int, rounds: int
) -> tuple[float, float, float]:
    """(database microseconds, WAL bytes per row updated, share of HOT updates)."""
    conn.execute("DROP INDEX IF EXISTS job_event_open_gauges")
    conn.execute("DELETE FROM job_event WHERE job_id LIKE 'progress-%'")
    conn.execute("VACUUM job_event")
    conn.execute(PROGRESS_ROWS_SQL, {"rows": open_steps * 5})
    if indexed:
        conn.execute(GAUGE_INDEX)
    ids = [r[0] for r in conn.execute(PROGRESS_IDS_SQL)]
    lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
    seconds, hot, updated = 0.0, 0, 0
    for number in range(rounds):
        with conn.transaction():  # the transaction's own counters say whether it was HOT
            started = time.perf_counter()
            conn.execute(PROGRESS_SQL[indexed], (number, ids))
            seconds += time.perf_counter() - started
            counted = conn.execute(HOT_SQL).fetchone() or (0, 0)
        hot, updated = hot + counted[0], updated + counted[1]
    wal = conn.execute("SELECT pg_current_wal_lsn() - %s::pg_lsn", lsn).fetchone()
    conn.execute("DELETE FROM job_event WHERE job_id LIKE 'progress-%'")
    writes = rounds * len(ids)
    return seconds / writes * 1e6, float(wal[0] if wal else 0) / writes, hot / max(updated, 1)
