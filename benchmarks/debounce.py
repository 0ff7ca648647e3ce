"""Target 5: database writes per step against progress events, with a short debounce.

Each case is one job with one step that reports N progress events spread over D seconds, on
its own database. Writes are the rows the server inserted or updated in job_event
(pg_stat_user_tables n_tup_ins + n_tup_upd deltas, read after the writer's session ended so its
statistics are flushed). The bound is 2 + ceil(D / debounce): the open, the close and at most
one progress write per debounce window.
"""

from __future__ import annotations

import argparse
import math
import time

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import set_span_in_context

from otel_jobsteps import JOB_STEP_KEY, JobStepsProcessor

from .bigtable import table_counters, wait_for_backends_gone
from .common import WRITER_APPLICATION, Databases, Row, job_attributes, server, verdict

DEBOUNCE_MS = 100
# (events, seconds over which they are spread)
CASES = ((1, 0.0), (10, 0.05), (50, 1.0), (200, 2.0))
QUICK_CASES = ((10, 0.05), (50, 1.0))


def one_case(dsn: str, events: int, seconds: float) -> dict[str, float]:
    processor = JobStepsProcessor(dsn, debounce_ms=DEBOUNCE_MS)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("benchmarks.debounce")
    job = tracer.start_span("job", attributes=job_attributes(f"debounce-{events}"))
    span = tracer.start_span(
        "step", context=set_span_in_context(job), attributes={JOB_STEP_KEY: "WORK"}
    )
    interval = seconds / (events - 1) if events > 1 else 0.0
    started = last = time.perf_counter()
    for number in range(events):
        delay = started + number * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        last = time.perf_counter()
        span.add_event("progress", {"done": number + 1, "total": events})
    spread = last - started  # D: from the first event to the last
    span.end()
    # The job stays open: its end would close nothing more in job_event, only write job_log.
    processor.force_flush(30_000)
    provider.shutdown()
    job.end()
    return {"events": events, "spread": spread}


def measure(dbs: Databases, cases: tuple[tuple[int, float], ...]) -> list[dict[str, float]]:
    results = []
    for events, seconds in cases:
        dsn = dbs.fresh("debounce")
        try:
            before = table_counters(dsn)["job_event"]
            result = one_case(dsn, events, seconds)
            wait_for_backends_gone(dsn, WRITER_APPLICATION)
            after = table_counters(dsn)["job_event"]
        finally:
            dbs.drop(dsn)
        result["writes"] = (after["n_tup_ins"] - before["n_tup_ins"]) + (
            after["n_tup_upd"] - before["n_tup_upd"]
        )
        result["bound"] = 2 + math.ceil(result["spread"] / (DEBOUNCE_MS / 1000.0))
        results.append(result)
    return results


def rows(results: list[dict[str, float]]) -> list[Row]:
    out = []
    for result in results:
        out.append(
            Row(
                "5",
                f"{int(result['events'])} events over {result['spread']:.2f} s "
                f"(debounce {DEBOUNCE_MS} ms)",
                f"{int(result['writes'])} writes",
                f"bound 2 + ceil(D/debounce) = {int(result['bound'])}",
                f"{result['writes'] / result['bound']:.2f}x",
                "<= 1.00x",
                verdict(0 < result["writes"] <= result["bound"]),
            )
        )
    return out


def run(dbs: Databases, *, quick: bool) -> list[Row]:
    return rows(measure(dbs, QUICK_CASES if quick else CASES))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="loopback server DSN (default: embedded PostgreSQL)")
    args = parser.parse_args()
    with server(args.dsn) as server_dsn:
        dbs = Databases(server_dsn)
        try:
            for row in rows(measure(dbs, CASES)):
                print(row.measure, row.value, row.compared, row.verdict)
        finally:
            dbs.close()


if __name__ == "__main__":
    main()
