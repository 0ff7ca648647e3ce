"""Targets 2 and 4: end-to-end throughput, beside what PostgreSQL allows, on an empty and a big
table.

Ours: one process runs jobs as fast as it can (3 steps, 3 progress events each); the rate is
steps from the first span to force_flush returning (after a short warm-up that opens the
connection). Repetitions interleave ours on a fresh empty database (with the writer thread, then
with the writer process), the pipelined-batch limit
(insert, progress, close per step; 1,000 steps per pipelined transaction) on a fresh database
and ours on the big table; medians are compared. The big table's seq_scan counters are read
around each of our runs: the writer must not scan job_event or job_log.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JobStepsProcessor

from . import baselines
from .bigtable import fill, table_counters, wait_for_backends_gone
from .common import (
    VERIFY_APPLICATION,
    WRITER_APPLICATION,
    Databases,
    Row,
    count_closed_steps,
    fmt_rate,
    fmt_ratio,
    median,
    run_jobs,
    server,
    verdict,
)

TARGET_STEPS_PER_S = 25_000


def ours_once(dsn: str, jobs: int, prefix: str, *, writer: str = "thread") -> dict[str, Any]:
    """One timed run of our processor; verifies every step row is closed and every log written."""
    processor = JobStepsProcessor(dsn, writer=writer)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("benchmarks.throughput")
    try:
        run_jobs(tracer, prefix + "w", 20)
        processor.force_flush(30_000)
        started = time.perf_counter()
        steps = run_jobs(tracer, prefix, jobs)
        generated = time.perf_counter()
        flushed = processor.force_flush(300_000)
        finished = time.perf_counter()
        stats = processor.stats()
    finally:
        provider.shutdown()
    return {
        "rate": steps / (finished - started),
        "generate_s": generated - started,
        "drain_s": finished - generated,
        "flushed": flushed,
        "steps": steps,
        "stats": stats,
    }


def verify(dsn: str, prefix: str, jobs: int) -> bool:
    closed, logs = count_closed_steps(dsn, prefix)
    return closed == jobs * 3 and logs == jobs


def generation_only(jobs: int) -> float:
    """Steps/s of the same workload with no processor: the SDK's own ceiling."""
    provider = TracerProvider()
    tracer = provider.get_tracer("benchmarks.throughput")
    run_jobs(tracer, "gen-w", 100)
    started = time.perf_counter()
    steps = run_jobs(tracer, "gen", jobs)
    rate = steps / (time.perf_counter() - started)
    provider.shutdown()
    return rate


def measure(
    dbs: Databases,
    *,
    jobs: int,
    repetitions: int,
    big_dsn: str | None,
    rtt_steps: int,
    copy_rows: int,
) -> dict[str, Any]:
    steps = jobs * 3
    result: dict[str, Any] = {
        "ours": [],
        "process": [],
        "pipe1000": [],
        "big": [],
        "seq_scans": [],
        "verified": True,
        "flushed": True,
    }
    for repetition in range(repetitions):
        dsn = dbs.fresh("empty")
        run = ours_once(dsn, jobs, f"run{repetition}")
        result["verified"] &= verify(dsn, f"run{repetition}", jobs)
        result["flushed"] &= run["flushed"]
        result["ours"].append(run)
        dbs.drop(dsn)
        dsn = dbs.fresh("process")
        run = ours_once(dsn, jobs, f"proc{repetition}", writer="process")
        result["verified"] &= verify(dsn, f"proc{repetition}", jobs)
        result["flushed"] &= run["flushed"]
        result["process"].append(run)
        dbs.drop(dsn)
        dsn = dbs.fresh("pipe")
        result["pipe1000"].append(baselines.pipelined(dsn, steps, 1000))
        dbs.drop(dsn)
        if big_dsn is not None:
            prefix = f"big{repetition}"
            wait_for_backends_gone(big_dsn, WRITER_APPLICATION, VERIFY_APPLICATION)
            before = table_counters(big_dsn)
            run = ours_once(big_dsn, jobs, prefix)
            wait_for_backends_gone(big_dsn, WRITER_APPLICATION)
            after = table_counters(big_dsn)
            result["seq_scans"].append(
                {t: after[t]["seq_scan"] - before[t]["seq_scan"] for t in after}
            )
            result["verified"] &= verify(big_dsn, prefix, jobs)
            result["flushed"] &= run["flushed"]
            result["big"].append(run)
    dsn = dbs.fresh("rtt")
    result["rtt"] = baselines.round_trips(dsn, rtt_steps)
    dbs.drop(dsn)
    dsn = dbs.fresh("pipe100")
    result["pipe100"] = baselines.pipelined(dsn, steps, 100)
    dbs.drop(dsn)
    dsn = dbs.fresh("copy")
    result["copy"] = baselines.copy_rows(dsn, copy_rows)
    dbs.drop(dsn)
    result["ceiling"] = generation_only(jobs)
    return result


def rows(result: dict[str, Any], *, jobs: int, repetitions: int, big_rows: int | None) -> list[Row]:
    ours = median([run["rate"] for run in result["ours"]])
    process = median([run["rate"] for run in result["process"]])
    generate = median([run["generate_s"] for run in result["ours"]])
    drain = median([run["drain_s"] for run in result["ours"]])
    pipe = median(result["pipe1000"])
    rtt = result["rtt"]
    ok = "rows verified" if result["verified"] and result["flushed"] else "ROWS MISSING"
    out = [
        Row("2", "baseline: 3 autocommit round trips per step", fmt_rate(rtt)),
        Row("2", "baseline: pipelined, batches of 100 steps", fmt_rate(result["pipe100"])),
        Row(
            "2",
            "limit: pipelined, batches of 1,000 steps",
            fmt_rate(pipe),
            f"median of {repetitions}",
        ),
        Row("2", "reference: raw COPY", fmt_rate(result["copy"], "rows/s")),
        Row(
            "2",
            "reference: same jobs, no processor (SDK only)",
            fmt_rate(result["ceiling"]),
            "ceiling for any processor",
        ),
        Row(
            "2",
            f"ours end to end ({jobs * 3:,} steps, {ok})",
            fmt_rate(ours),
            f"{TARGET_STEPS_PER_S:,} steps/s",
            fmt_ratio(ours / TARGET_STEPS_PER_S),
            ">= 1.00x",
            verdict(ours >= TARGET_STEPS_PER_S and ok == "rows verified"),
        ),
        Row(
            "2",
            "ours vs the SDK alone (same jobs, no processor)",
            fmt_rate(ours),
            "SDK only",
            fmt_ratio(ours / result["ceiling"]),
            ">= 0.60x",
            verdict(ours >= 0.6 * result["ceiling"] and ok == "rows verified"),
        ),
        Row(
            "2",
            "ours, writer process, vs the SDK alone",
            fmt_rate(process),
            "SDK only",
            fmt_ratio(process / result["ceiling"]),
            ">= 0.60x",
            verdict(process >= 0.6 * result["ceiling"] and ok == "rows verified"),
        ),
        Row(
            "2",
            "ours vs the pipelined limit",
            fmt_rate(ours),
            "pipelined 1,000",
            fmt_ratio(ours / pipe),
            ">= 0.80x",
            verdict(ours >= 0.8 * pipe),
        ),
        Row(
            "2",
            "ours vs 3 round trips per step",
            fmt_rate(ours),
            "3 round trips",
            fmt_ratio(ours / rtt),
            ">= 15x",
            verdict(ours >= 15 * rtt),
        ),
        Row(
            "2", "ours: span work / drain after the last span", f"{generate:.2f} s / {drain:.2f} s"
        ),
    ]
    if result["big"] and big_rows is not None:
        big = median([run["rate"] for run in result["big"]])
        scans = result["seq_scans"]
        event_scans = sum(s.get("job_event", 0) for s in scans)
        log_scans = sum(s.get("job_log", 0) for s in scans)
        out += [
            Row(
                "4",
                f"ours with {big_rows:,} rows in job_event",
                fmt_rate(big),
                "empty table",
                fmt_ratio(big / ours),
                ">= 0.80x",
                verdict(big >= 0.8 * ours),
            ),
            Row(
                "4",
                "seq scans by the writer on the big table",
                f"{event_scans} job_event, {log_scans} job_log",
                "pg_stat_user_tables",
                "",
                "0",
                verdict(event_scans == 0 and log_scans == 0),
            ),
        ]
    return out


def prepare_big(dbs: Databases, rows_count: int) -> tuple[str, dict[str, float]]:
    dsn = dbs.fresh("big")
    return dsn, fill(dsn, rows_count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="loopback server DSN (default: embedded PostgreSQL)")
    parser.add_argument("--jobs", type=int, default=15_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--big-rows", type=int, default=0, help="also run on a filled table")
    parser.add_argument("--ours-only", action="store_true", help="only our runs (for profiling)")
    args = parser.parse_args()
    with server(args.dsn) as server_dsn:
        dbs = Databases(server_dsn)
        try:
            if args.ours_only:
                for repetition in range(args.repetitions):
                    dsn = dbs.fresh("empty")
                    run = ours_once(dsn, args.jobs, f"run{repetition}")
                    print(
                        f"{run['rate']:,.0f} steps/s  span work {run['generate_s']:.2f} s  "
                        f"drain {run['drain_s']:.2f} s  {run['stats']}"
                    )
                    dbs.drop(dsn)
                return
            big = None
            if args.big_rows:
                big, timings = prepare_big(dbs, args.big_rows)
                print("fill:", timings)
            result = measure(
                dbs,
                jobs=args.jobs,
                repetitions=args.repetitions,
                big_dsn=big,
                rtt_steps=2000,
                copy_rows=100_000,
            )
            for row in rows(
                result, jobs=args.jobs, repetitions=args.repetitions, big_rows=args.big_rows or None
            ):
                print(f"{row.measure:55} {row.value:>22} {row.ratio:>7} {row.verdict}")
        finally:
            dbs.close()


if __name__ == "__main__":
    main()
