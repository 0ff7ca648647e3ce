"""Target 6: memory stays bounded while the database is unreachable.

Runs in its own interpreter (``python -m benchmarks.memory --child``) so the RSS it reports
belongs to this test only. The processor points at a closed port on 127.0.0.1; jobs of 3 steps
with one progress event each are offered until the step count is reached. RSS is read after a
warm-up and at each quarter. "The queue bound" is measured, not guessed: at the end the queue
and the unwritten batch are at their limits, and their deep size (every object reachable from
them, counted once) is what the bounds hold, reported beside the RSS. The verdict is the bound
the README states for the default max_queue_size (STATED_BOUND_MIB): the process's extra RSS
must stay under it, and must stop growing (the last quarter adds almost nothing).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
import types
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from otel_jobsteps import JobStepsProcessor

from .common import Row, closed_port_dsn, run_jobs, verdict

MiB = 2**20
_SKIPPED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def deep_size(*roots: object, seen: set[int] | None = None) -> int:
    """Bytes of every object reachable from ``roots`` and not in ``seen`` (types, modules and
    functions excluded); ``seen`` is updated, so parts measured in turn are counted once."""
    seen = set() if seen is None else seen
    stack: list[Any] = list(roots)
    total = 0
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, _SKIPPED):
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        stack.extend(gc.get_referents(item))
    return total


def held_by(processor: JobStepsProcessor) -> dict[str, int]:
    """Deep size of what the processor holds for the database, by part.

    Reads private attributes; a part the package no longer has is left out of the result.
    """
    writer = getattr(processor, "_writer", None)
    parts = {
        "queue": getattr(writer, "_queue", None),
        "unwritten batch": getattr(writer, "_unwritten", None),
        "recorder": getattr(processor, "_recorder", None),
    }
    seen: set[int] = set()
    return {name: deep_size(part, seen=seen) for name, part in parts.items() if part is not None}


def child(steps: int) -> None:
    dsn = closed_port_dsn()
    processor = JobStepsProcessor(dsn, connect_timeout_s=1.0, shutdown_timeout_ms=2000)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("benchmarks.memory")
    run_jobs(tracer, "mem-warm", 300, events=1)
    time.sleep(0.3)
    gc.collect()
    base = rss_bytes()
    started = time.perf_counter()
    quarter_jobs = steps // 3 // 4
    growth = []
    for quarter in range(4):
        run_jobs(tracer, f"mem{quarter}", quarter_jobs, events=1)
        gc.collect()
        growth.append(rss_bytes() - base)
    elapsed = time.perf_counter() - started
    stats = processor.stats()
    held = held_by(processor)
    print(
        json.dumps(
            {
                "steps": quarter_jobs * 3 * 4,
                "seconds": elapsed,
                "growth": growth,
                "held": held,
                "stats": stats,
            }
        ),
        flush=True,
    )
    provider.shutdown()


def measure(steps: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.memory", "--child", "--steps", str(steps)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"memory child failed: {done.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


STATED_BOUND_MIB = 192  # README, "How it behaves when things fail": default max_queue_size


def _count(value: int) -> str:
    return f"{value / 1000:.0f}k" if value >= 10_000 else str(value)


def rows(result: dict[str, Any]) -> list[Row]:
    growth = result["growth"]
    total, three_quarters = growth[-1], growth[-2]
    parts: dict[str, int] = result["held"]
    stats = result["stats"]
    drops = {
        k.removeprefix("dropped_"): v for k, v in stats.items() if k.startswith("dropped") and v
    }
    drop_text = f"{_count(sum(drops.values()))}: " + ", ".join(
        f"{k} {_count(v)}" for k, v in sorted(drops.items(), key=lambda item: -item[1])
    )
    late_growth = total - three_quarters
    plateau = late_growth <= max(0.05 * total, 8 * MiB)
    held_text = " + ".join(f"{name} {size / MiB:.0f}" for name, size in parts.items())
    return [
        Row(
            "6",
            f"RSS growth, {result['steps']:,} steps offered, database down",
            f"{total / MiB:.0f} MiB",
            f"stated bound {STATED_BOUND_MIB} MiB (objects held: {held_text} MiB)",
            f"{total / (STATED_BOUND_MIB * MiB):.2f}x",
            "<= 1.00x",
            verdict(total <= STATED_BOUND_MIB * MiB),
        ),
        Row(
            "6",
            "RSS growth over the last quarter of the offer",
            f"{late_growth / MiB:.0f} MiB",
            f"first three quarters {three_quarters / MiB:.0f} MiB",
            "",
            "flat",
            verdict(plateau),
        ),
        Row(
            "6",
            "stats(): queued / open attempts / write failures",
            f"{stats.get('queued', 0):,} / {stats.get('open_attempts', 0):,} / "
            f"{stats.get('write_failed', 0):,}",
            f"offered in {result['seconds']:.0f} s",
        ),
        Row("6", "stats(): drops", drop_text if drops else "none"),
    ]


def run(*, quick: bool) -> list[Row]:
    return rows(measure(400_000 if quick else 1_000_000))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.steps)
        return
    for row in rows(measure(args.steps)):
        print(row.measure, "|", row.value, "|", row.compared, "|", row.ratio, row.verdict)


if __name__ == "__main__":
    main()
