"""Issue 13, fleet: N worker processes (1, 2, 4, 8), each with its own JobStepsProcessor, writing to
one PostgreSQL at once.

Each round gets a fresh migrated database. The workers are spawned, warm up (connection open,
schema checked), wait on one barrier, run the same jobs as target 2 (3 steps x 3 progress events)
and return when ``force_flush`` does. The fleet's rate is all steps over the time from the
barrier to the last worker's flush (``time.monotonic`` is one clock for every process here).
Afterwards every row is verified in SQL: counts exact, no attempt with two open steps, steps
of an attempt one after the other, each job_log row dated at or after its attempt's last step
close. "Saturates" at the smallest N that no larger N beats by 10% or more.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from typing import Any

import psycopg
from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JobStepsProcessor

from .common import (
    DOMAIN,
    STEP_KEYS,
    VERIFY_APPLICATION,
    Databases,
    Row,
    fmt_rate,
    fmt_ratio,
    run_jobs,
    server,
    verdict,
)

PROCESS_COUNTS = (1, 2, 4, 8)
SATURATION_GAIN = 1.10
# Columns of VIOLATIONS that count rows; every other column counts broken invariants.
COUNT_COLUMNS = frozenset({"attempts", "step_rows", "job_logs"})

# Each check counts what breaks it, over the jobs of this run (job ids start with %(prefix)s).
VIOLATIONS = """
WITH steps AS (
    SELECT * FROM job_event
    WHERE domain = %(domain)s AND job_id LIKE %(prefix)s AND type = 'STEP'
), attempts AS (
    SELECT job_id, attempt,
           count(*) AS steps,
           count(*) FILTER (WHERE ended_at IS NULL) AS open_steps,
           count(*) FILTER (WHERE step_status <> 'COMPLETED') AS not_completed,
           array_agg(step_key ORDER BY created_at, id) AS keys,
           max(ended_at) AS last_close
    FROM steps GROUP BY job_id, attempt
), logs AS (
    SELECT * FROM job_log WHERE domain = %(domain)s AND job_id LIKE %(prefix)s
)
SELECT
    (SELECT count(*) FROM attempts) AS attempts,
    (SELECT COALESCE(sum(steps), 0)::bigint FROM attempts) AS step_rows,
    (SELECT count(*) FROM logs) AS job_logs,
    (SELECT count(*) FROM attempts WHERE open_steps > 1) AS two_open_steps,
    (SELECT count(*) FROM attempts WHERE open_steps > 0 OR not_completed > 0) AS not_closed,
    (SELECT count(*) FROM attempts WHERE keys <> %(keys)s::text[]) AS wrong_steps,
    (SELECT count(*)
     FROM (SELECT created_at,
                  lag(ended_at) OVER (PARTITION BY job_id, attempt
                                      ORDER BY created_at, id) AS previous_end
           FROM steps) AS s
     WHERE s.created_at < s.previous_end) AS overlapping_steps,
    (SELECT count(*) FROM logs AS l JOIN attempts AS a USING (job_id, attempt)
     WHERE l.created_at < a.last_close OR l.status <> 'COMPLETED') AS log_before_close,
    (SELECT count(*) FROM (SELECT job_id, attempt FROM logs
                           GROUP BY job_id, attempt HAVING count(*) > 1) AS twice) AS two_logs
"""


@dataclass(frozen=True, slots=True)
class WorkerResult:
    """What one worker process reports back."""

    started: float
    finished: float
    steps: int
    flushed: bool
    last_error: str | None


def _worker(dsn: str, prefix: str, jobs: int, barrier: Barrier, results: Any) -> None:
    """One worker process: its own processor and provider, the jobs, then force_flush."""
    processor = JobStepsProcessor(dsn)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("benchmarks.fleet")
    try:
        run_jobs(tracer, "warm-" + prefix, 20)
        processor.force_flush(60_000)
        barrier.wait()
        started = time.monotonic()
        steps = run_jobs(tracer, prefix, jobs)
        flushed = processor.force_flush(600_000)
        finished = time.monotonic()
        # Every problem the processor counts also sets last_error: None means none at all.
        last_error = processor.stats()["last_error"]
    finally:
        provider.shutdown()
    results.put(WorkerResult(started, finished, steps, flushed, last_error))


def violations(dsn: str, prefix: str) -> dict[str, int]:
    """The invariant checks of VIOLATIONS over the jobs whose id starts with ``prefix``."""
    with psycopg.connect(dsn, autocommit=True, application_name=VERIFY_APPLICATION) as conn:
        # Fresh statistics: estimated from an empty table, the joins below become nested loops
        # over every attempt twice (minutes at 8 processes).
        conn.execute("ANALYZE job_event, job_log")
        cursor = conn.execute(
            VIOLATIONS, {"domain": DOMAIN, "prefix": prefix + "%", "keys": list(STEP_KEYS)}
        )
        row = cursor.fetchone()
        names = [column.name for column in cursor.description or ()]
    return dict(zip(names, row or (), strict=True))


def run_fleet(dsn: str, processes: int, jobs_per_process: int) -> dict[str, Any]:
    """Run ``processes`` workers against ``dsn`` at once; their results and the row checks."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes)
    results = context.Queue()
    workers = [
        context.Process(
            target=_worker,
            args=(dsn, f"f{processes}p{index}-", jobs_per_process, barrier, results),
            name=f"fleet-worker-{index}",
        )
        for index in range(processes)
    ]
    for worker in workers:
        worker.start()
    done: list[WorkerResult] = [results.get(timeout=900) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    steps = sum(result.steps for result in done)
    elapsed = max(r.finished for r in done) - min(r.started for r in done)
    found = violations(dsn, f"f{processes}p")
    expected_attempts = processes * jobs_per_process
    exact = (
        found["attempts"] == expected_attempts
        and found["step_rows"] == steps
        and found["job_logs"] == expected_attempts
        and not any(count for name, count in found.items() if name not in COUNT_COLUMNS)
        and all(r.flushed and r.last_error is None for r in done)
        and all(worker.exitcode == 0 for worker in workers)
    )
    return {
        "processes": processes,
        "steps": steps,
        "rate": steps / elapsed,
        "slowest_worker": min(r.steps / (r.finished - r.started) for r in done),
        "exact": exact,
        "violations": found,
    }


def saturation(rounds: list[dict[str, Any]]) -> int | None:
    """The smallest process count that no larger count beats by 10% (None: the largest run
    still gained, so the fleet did not saturate within the counts run)."""
    for index, result in enumerate(rounds[:-1]):
        if max(later["rate"] for later in rounds[index + 1 :]) < SATURATION_GAIN * result["rate"]:
            return int(result["processes"])
    return None


def measure(
    dbs: Databases, *, jobs_per_process: int, counts: tuple[int, ...] = PROCESS_COUNTS
) -> list[dict[str, Any]]:
    rounds = []
    for processes in counts:
        dsn = dbs.fresh(f"fleet{processes}")
        try:
            rounds.append(run_fleet(dsn, processes, jobs_per_process))
        finally:
            dbs.drop(dsn)
    return rounds


def rows(rounds: list[dict[str, Any]]) -> list[Row]:
    one = rounds[0]["rate"]
    out = []
    for result in rounds:
        checks = "rows exact" if result["exact"] else f"VIOLATIONS {result['violations']}"
        label = (
            f"fleet: {result['processes']} worker processes ({result['steps']:,} steps, {checks})"
        )
        out.append(
            Row(
                "13",
                label,
                fmt_rate(result["rate"]),
                f"1 process; slowest worker {fmt_rate(result['slowest_worker'])}",
                fmt_ratio(result["rate"] / one),
                "rows exact",
                verdict(result["exact"]),
            )
        )
    peak = max(rounds, key=lambda result: result["rate"])
    knee = saturation(rounds)
    out.append(
        Row(
            "13",
            "fleet: saturation",
            f"peak {fmt_rate(peak['rate'])} at {peak['processes']} processes",
            "no larger count gains 10%",
            "",
            "",
            f"saturates at {knee}" if knee else "not saturated",
        )
    )
    return out


def run(dbs: Databases, *, quick: bool) -> list[Row]:
    """The section of ``python -m benchmarks``: the full fleet, or 1 and 2 processes when quick."""
    if quick:
        return rows(measure(dbs, jobs_per_process=500, counts=(1, 2)))
    return rows(measure(dbs, jobs_per_process=5_000))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="loopback server DSN (default: embedded PostgreSQL)")
    parser.add_argument("--jobs", type=int, default=5_000, help="jobs per worker process")
    parser.add_argument(
        "--processes", default=",".join(map(str, PROCESS_COUNTS)), help="comma-separated counts"
    )
    args = parser.parse_args()
    counts = tuple(int(part) for part in args.processes.split(","))
    with server(args.dsn) as server_dsn:
        dbs = Databases(server_dsn)
        try:
            for row in rows(measure(dbs, jobs_per_process=args.jobs, counts=counts)):
                print(f"{row.measure:70} {row.value:>32} {row.ratio:>7} {row.verdict}")
        finally:
            dbs.close()


if __name__ == "__main__":
    main()
