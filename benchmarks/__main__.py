"""``python -m benchmarks [--dsn DSN] [--quick] [--strict]``: how fast otel_jobsteps is.

Measures, side by side in one run, what the processor adds to a job's span, how many steps per
second reach PostgreSQL, how long a step end takes to become a row, how throughput holds on a big
table, how many writes progress debouncing saves, memory while the database is down, a fleet
of worker processes, what the step metrics cost the writer and what log records cost, and
CPU per step or span beside its floor (--baseline PATH: beside another checkout's); one
table, each row with its ratio and its target. Without --dsn an embedded PostgreSQL is started
(and deleted after). --quick: the same measurements, smaller, in minutes. A missed target is
reported (FAIL in its row) and the exit code stays 0; --strict exits 1 on a miss. A benchmark
that crashes always exits 1. --markdown PATH writes this server's section of a results page.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

from . import (
    cpu,
    debounce,
    explain,
    fleet,
    hot_path,
    ingest,
    latency,
    logs,
    memory,
    metrics,
    open_spans,
    open_steps,
    sampling,
    throughput,
    web,
)
from .common import (
    Databases,
    Row,
    format_table,
    machine_description,
    markdown_table,
    server,
)

SECTIONS = (
    "hot",
    "throughput",
    "open-steps",
    "open-spans",
    "latency",
    "debounce",
    "memory",
    "fleet",
    "web",
    "ingest",
    "metrics",
    "logs",
    "cpu",
    "sampling",
)
CRASHED = "CRASHED"
DEFAULT_BIG_ROWS = 5_000_000
QUICK_BIG_ROWS = 200_000


def _section(name: str, work: Callable[[], list[Row]], rows: list[Row]) -> None:
    started = time.perf_counter()
    print(f"-- {name} ...", flush=True)
    try:
        found = work()
    except Exception as error:  # noqa: BLE001 - one broken benchmark must not hide the others
        found = [
            Row(
                "-",
                f"{name} benchmark crashed",
                f"{type(error).__name__}: {error}",
                verdict=CRASHED,
            )
        ]
    for row in found:
        print(f"   {row.measure}: {row.value} {row.ratio} {row.verdict}".rstrip(), flush=True)
    print(f"   ({time.perf_counter() - started:.0f} s)", flush=True)
    rows.extend(found)


def _throughput_and_scale(
    dbs: Databases, *, quick: bool, big_rows: int, verbose: bool, notes: list[str]
) -> list[Row]:
    jobs, repetitions = (2_000, 1) if quick else (15_000, 3)
    big_dsn = None
    out: list[Row] = []
    try:
        if big_rows:
            big_dsn, timings = throughput.prepare_big(dbs, big_rows)
            notes.append(
                f"big table: {big_rows:,} job_event rows filled in {timings['fill_s']:.0f} s,"
                f" indexes rebuilt in {timings['index_s']:.0f} s,"
                f" VACUUM ANALYZE {timings['vacuum_s']:.0f} s"
            )
        result = throughput.measure(
            dbs,
            jobs=jobs,
            repetitions=repetitions,
            big_dsn=big_dsn,
            rtt_steps=500 if quick else 2_000,
            copy_rows=50_000 if quick else 200_000,
        )
        out += throughput.rows(
            result, jobs=jobs, repetitions=repetitions, big_rows=big_rows or None
        )
        if big_dsn is not None:
            plans = explain.explain_all(big_dsn)
            if verbose:
                explain.print_plans(plans)
            print(explain.summary(plans))
            out += explain.rows(plans, big_rows)
    finally:
        if big_dsn is not None:
            dbs.drop(big_dsn)
    return out


def write_markdown(
    path: Path, key: str, machine: dict[str, str], rows: list[Row], notes: list[str], command: str
) -> None:
    """Replace this server's section of the page (or append it), keeping the others."""
    begin, end = f"<!-- bench:{key} -->", f"<!-- /bench:{key} -->"
    body = "\n".join(
        [
            begin,
            f"## {machine['server']}",
            "",
            f"Run {time.strftime('%Y-%m-%d %H:%M %Z')} with `{command}`.",
            "",
            *[f"- {name}: {value}" for name, value in machine.items()],
            *[f"- {note}" for note in notes],
            "",
            markdown_table(rows),
            end,
        ]
    )
    text = path.read_text("utf-8") if path.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _match: body, text)
    else:
        text = text.rstrip("\n") + "\n\n" + body + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, "utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dsn", help="loopback server DSN (default: embedded PostgreSQL)")
    parser.add_argument("--quick", action="store_true", help="smaller counts: a smoke run")
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 when a target is missed (default: 0)"
    )
    parser.add_argument("--only", help=f"comma-separated sections of {','.join(SECTIONS)}")
    parser.add_argument("--big-rows", type=int, help="job_event rows for the scale test")
    parser.add_argument("--markdown", type=Path, help="write this run's section to a page")
    parser.add_argument("--verbose", action="store_true", help="print every EXPLAIN plan")
    parser.add_argument(
        "--baseline", type=Path, help="cpu: measure another checkout's package beside this one"
    )
    args = parser.parse_args()
    chosen = set(args.only.split(",")) if args.only else set(SECTIONS)
    unknown = chosen - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    big_rows = (
        args.big_rows
        if args.big_rows is not None
        else (QUICK_BIG_ROWS if args.quick else DEFAULT_BIG_ROWS)
    )
    started = time.perf_counter()
    rows: list[Row] = []
    notes: list[str] = []
    with server(args.dsn) as server_dsn:
        machine = machine_description(server_dsn, embedded=not args.dsn)
        for name, value in machine.items():
            print(f"{name:18} {value}")
        dbs = Databases(server_dsn)
        try:
            if "hot" in chosen:
                _section("hot path", lambda: hot_path.run(dbs, quick=args.quick), rows)
            if "throughput" in chosen:
                _section(
                    "throughput and scale",
                    lambda: _throughput_and_scale(
                        dbs, quick=args.quick, big_rows=big_rows, verbose=args.verbose, notes=notes
                    ),
                    rows,
                )
            if "open-steps" in chosen:
                _section("open steps", lambda: open_steps.run(dbs, quick=args.quick), rows)
            if "open-spans" in chosen:
                _section("open spans", lambda: open_spans.run(dbs, quick=args.quick), rows)
            if "latency" in chosen:
                _section("latency", lambda: latency.run(dbs, quick=args.quick), rows)
            if "debounce" in chosen:
                _section("debounce", lambda: debounce.run(dbs, quick=args.quick), rows)
            if "fleet" in chosen:
                _section("fleet", lambda: fleet.run(dbs, quick=args.quick), rows)
            if "web" in chosen:
                _section("web", lambda: web.run(dbs, big_rows=big_rows, quick=args.quick), rows)
            if "ingest" in chosen:
                _section("OTLP ingest", lambda: ingest.run(dbs, quick=args.quick), rows)
            if "metrics" in chosen:
                _section("step metrics", lambda: metrics.run(dbs, quick=args.quick), rows)
            if "logs" in chosen:
                _section("log records", lambda: logs.run(dbs, quick=args.quick), rows)
            if "cpu" in chosen:
                _section(
                    "CPU per unit beside its floor",
                    lambda: cpu.run(server_dsn, quick=args.quick, baseline=args.baseline),
                    rows,
                )
            if "sampling" in chosen:
                _section("sampling", lambda: sampling.run(dbs, quick=args.quick), rows)
        finally:
            dbs.close()
        if "memory" in chosen:
            _section("memory", lambda: memory.run(quick=args.quick), rows)
        elapsed = time.perf_counter() - started
        notes.append(f"whole run: {elapsed:.0f} s{' (--quick)' if args.quick else ''}")
        print()
        print(format_table(rows))
        print()
        for note in notes:
            print(note)
        if args.markdown:
            key = ("embedded-" if not args.dsn else "dsn-") + machine["server"].split()[1]
            command = (
                "python -m benchmarks"
                + (" --dsn DSN" if args.dsn else "")
                + (" --quick" if args.quick else "")
            )
            write_markdown(args.markdown, key, machine, rows, notes, command)
    return exit_code(rows, strict=args.strict)


def exit_code(rows: list[Row], *, strict: bool) -> int:
    """Print the verdict line; 1 when a benchmark crashed, or a target was missed and strict."""
    missed = sum(row.verdict == "FAIL" for row in rows)
    crashed = sum(row.verdict == CRASHED for row in rows)
    met = sum(row.verdict == "PASS" for row in rows)
    print(f"targets: {met} met, {missed} missed; {crashed} benchmarks crashed")
    if missed and not strict:
        print("missed targets are reported, not failed; --strict makes them exit 1")
    return 1 if crashed or (missed and strict) else 0


if __name__ == "__main__":
    sys.exit(main())
