"""Issue 38: CPU per unit of work beside its floor, measured in the same run.

Live door (jobs of 3 steps x 3 progress events): this process's CPU per step (job thread and
writer thread, or job thread and writer process) beside the SDK's own (the same jobs with no
processor; BatchSpanProcessor to a discarding exporter for information), and the CPU of the
writer's PostgreSQL backend per step beside the COPY floor: the rows the run produced
(``job_event``, ``job_log``) copied out, then COPYed into empty tables made with
``LIKE ... INCLUDING ALL`` (the same indexes) in one transaction, by one backend, best of three.

collect (the same jobs as 1,000-span OTLP protobuf requests, one client, one worker): the CPU
of collect's processes per span beside decoding the same bodies in this process and reading
every attribute, and its PostgreSQL backends' CPU per span beside the COPY floor of the rows
they made. collect's answer counts once its rows are there.

CPU comes from ``time.process_time`` (this process) and ``/proc/<pid>/stat`` (writer and
collect processes, PostgreSQL backends: 10 ms ticks, hence runs of 9,000 steps and 10,000
spans). One round measures everything once, in a shuffled order, in a fresh interpreter;
rounds alternate, and each figure is the minimum over the rounds. ``--baseline PATH`` runs
every round a second time with the ``otel_jobsteps`` package of another checkout (a git
worktree) and prints both columns with their ratio: a change's before and after in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_jobsteps import JobStepsProcessor

from .common import (
    VERIFY_APPLICATION,
    Databases,
    Row,
    count_closed_steps,
    fmt_ratio,
    median,
    own_cpu_s,
    pid_cpu_s,
    run_jobs,
    server,
    verdict,
)
from .hot_path import DiscardingExporter
from .ingest import SPANS_PER_REQUEST, Send, _export_all, _post_all, collect, encoded_requests

STEPS = 3
ROOT = Path(__file__).resolve().parent.parent
US = 1e6
FLOOR_TABLES = ("job_event", "job_log")  # the rows both doors produce; staging is ours
COPY_REPEATS = 5


# -- PostgreSQL's side --------------------------------------------------------------------------


def backends(dsn: str) -> set[int]:
    """Server pids of the client connections to ``dsn``'s database, but the benchmark's own."""
    with psycopg.connect(dsn, autocommit=True, application_name=VERIFY_APPLICATION) as conn:
        found = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND application_name <> %s",
            (VERIFY_APPLICATION,),
        ).fetchall()
    return {pid for (pid,) in found}


def copy_floor_s(dsn: str) -> float:
    """Backend CPU seconds to COPY the rows of ``FLOOR_TABLES`` into empty tables of the same
    DDL in one transaction: the least any writer of those rows pays. Done into
    ``COPY_REPEATS`` sets of tables in a row and averaged, to get above /proc's 10 ms ticks."""
    data: dict[str, bytes] = {}
    schemas = [f"bench_floor_{number}" for number in range(COPY_REPEATS)]
    with psycopg.connect(dsn, autocommit=True, application_name=VERIFY_APPLICATION) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        pid = row[0]
        for table in FLOOR_TABLES:
            with conn.cursor().copy(f"COPY public.{table} TO STDOUT (FORMAT binary)") as out:
                data[table] = b"".join(bytes(block) for block in out)
            for schema in schemas:
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
                conn.execute(f"CREATE TABLE {schema}.{table} (LIKE public.{table} INCLUDING ALL)")
        before = pid_cpu_s([pid])
        for schema in schemas:
            with conn.transaction(), conn.cursor() as cur:
                for table, body in data.items():
                    with cur.copy(f"COPY {schema}.{table} FROM STDIN (FORMAT binary)") as copy:
                        copy.write(body)
        spent = pid_cpu_s([pid]) - before
        for schema in schemas:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
    return spent / COPY_REPEATS


# -- the live door ------------------------------------------------------------------------------


def sdk_alone(jobs: int, processor: BatchSpanProcessor | None) -> dict[str, float]:
    """CPU and wall seconds per step of the jobs with no processor (or ``processor``)."""
    provider = TracerProvider()
    if processor is not None:
        provider.add_span_processor(processor)
    tracer = provider.get_tracer("benchmarks.cpu")
    try:
        run_jobs(tracer, "warm", 100)
        provider.force_flush()
        started, cpu = time.perf_counter(), own_cpu_s()
        steps = run_jobs(tracer, "sdk", jobs)
        provider.force_flush()
        cpu, wall = own_cpu_s() - cpu, time.perf_counter() - started
    finally:
        provider.shutdown()
    return {"cpu": cpu / steps, "wall": wall / steps}


def live(dbs: Databases, jobs: int, writer: str) -> dict[str, float]:
    """Per step: this process's CPU (with the writer process's), the writer's backend CPU, the
    COPY floor of the rows it wrote, and the wall time from the first span to the flush."""
    dsn = dbs.fresh(writer)
    processor = JobStepsProcessor(dsn, writer=writer)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("benchmarks.cpu")
    try:
        warm = run_jobs(tracer, "warm", 20)
        processor.force_flush(30_000)
        pids = backends(dsn)
        started, cpu, backend = time.perf_counter(), own_cpu_s(), pid_cpu_s(pids)
        steps = run_jobs(tracer, "cpu", jobs)
        if not processor.force_flush(300_000):
            raise RuntimeError(f"the {writer} writer did not flush")
        wall = time.perf_counter() - started
        cpu, backend = own_cpu_s() - cpu, pid_cpu_s(pids) - backend
    finally:
        provider.shutdown()
    try:
        if count_closed_steps(dsn, "cpu") != (steps, jobs):
            raise RuntimeError(f"the {writer} writer's rows are not all there")
        floor = copy_floor_s(dsn)
    finally:
        dbs.drop(dsn)
    # The warm-up's rows are in the floor's COPY: count them in.
    return {
        "cpu": cpu / steps,
        "pg": backend / steps,
        "copy": floor / (steps + warm),
        "wall": wall / steps,
    }


# -- collect ------------------------------------------------------------------------------------


def decode_alone_s(bodies: Sequence[bytes]) -> float:
    """CPU seconds to parse ``bodies`` and read every span's fields, events and attribute
    values into a list: what any receiver pays before placing a span."""
    started = time.process_time()
    for body in bodies:
        seen: list[Any] = []
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            _values(resource.resource.attributes, seen)
            for scope in resource.scope_spans:
                for span in scope.spans:
                    seen.append((span.trace_id, span.span_id, span.parent_span_id, span.name))
                    seen.append((span.start_time_unix_nano, span.end_time_unix_nano))
                    seen.append((span.kind, span.status.code, span.status.message))
                    _values(span.attributes, seen)
                    for event in span.events:
                        seen.append((event.name, event.time_unix_nano))
                        _values(event.attributes, seen)
    return time.process_time() - started


def _values(attributes: Any, seen: list[Any]) -> None:
    for attribute in attributes:
        value = attribute.value
        seen.append((attribute.key, getattr(value, value.WhichOneof("value") or "string_value")))


def collected(dbs: Databases, bodies: list[bytes], send: Send, label: str) -> dict[str, float]:
    """Per span: collect's CPU (its processes), its backends' CPU and the COPY floor of the
    rows they made; the first body warms the connections and is not counted."""
    dsn = dbs.fresh(label)
    jobs = len(bodies) * SPANS_PER_REQUEST // (STEPS + 1)
    try:
        with collect(dsn, "--workers", "1") as receiver:
            send(receiver, bodies[:1], 1)
            pids = backends(dsn)
            mine, backend = pid_cpu_s([receiver.pid]), pid_cpu_s(pids)
            if set(send(receiver, bodies[1:], 1)) != {200}:
                raise RuntimeError(f"collect refused a request over {label}")
            deadline = time.monotonic() + 60
            while count_closed_steps(dsn, "cpu") != (jobs * STEPS, jobs):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"collect's rows over {label} are not all there")
                time.sleep(0.05)  # polling the table: nothing to wait on across processes
            later = backends(dsn)
            mine = pid_cpu_s([receiver.pid]) - mine
            backend = pid_cpu_s(pids | later) - backend
        floor = copy_floor_s(dsn)
    finally:
        dbs.drop(dsn)
    spans = (len(bodies) - 1) * SPANS_PER_REQUEST
    # The warm-up request's rows are in the floor's COPY: count them in.
    return {"cpu": mine / spans, "pg": backend / spans, "copy": floor / (spans + SPANS_PER_REQUEST)}


# -- one round, in a fresh interpreter ----------------------------------------------------------


def one_round(server_dsn: str, *, jobs: int, requests: int, seed: int) -> dict[str, float]:
    """Every measurement once, in a shuffled order: seconds per step or span, by name."""
    dbs = Databases(server_dsn)
    bodies = encoded_requests("cpu", requests + 1, SPANS_PER_REQUEST, steps=STEPS)
    out: dict[str, float] = {}

    def keep(prefix: str, found: dict[str, float]) -> None:
        out.update({f"{prefix}.{name}": value for name, value in found.items()})

    work: list[Callable[[], None]] = [
        lambda: keep("sdk", sdk_alone(jobs, None)),
        lambda: keep("batch", sdk_alone(jobs, BatchSpanProcessor(DiscardingExporter()))),
        lambda: keep("thread", live(dbs, jobs, "thread")),
        lambda: keep("process", live(dbs, jobs, "process")),
        lambda: keep("decode", {"cpu": decode_alone_s(bodies[1:]) / (requests * 1000)}),
        lambda: keep("http", collected(dbs, bodies, _post_all, "http")),
        lambda: keep("grpc", collected(dbs, bodies, _export_all, "grpc")),
    ]
    random.Random(seed).shuffle(work)
    try:
        for measure in work:
            measure()
    finally:
        dbs.close()
    return out


def _child_path(tree: Path, shim: Path) -> str:
    """PYTHONPATH for a round with ``tree``'s package: a directory holding only a link to it,
    then this checkout (for ``benchmarks``)."""
    link = shim / "otel_jobsteps"
    link.symlink_to(tree / "otel_jobsteps")
    return os.pathsep.join([str(shim), str(ROOT)])


def rounds(
    server_dsn: str, trees: Sequence[Path], *, count: int, jobs: int, requests: int
) -> list[list[dict[str, float]]]:
    """``count`` rounds for each tree, alternating; per tree, its rounds' results."""
    results: list[list[dict[str, float]]] = [[] for _ in trees]
    with tempfile.TemporaryDirectory(prefix="bench-cpu-") as scratch:
        paths = []
        for index, tree in enumerate(trees):
            shim = Path(scratch) / str(index)
            shim.mkdir()
            paths.append(_child_path(tree.resolve(), shim))
        for number in range(count):
            order = list(enumerate(paths))
            for index, path in order[:: -1 if number % 2 else 1]:  # ABBA: drift cancels out
                command = [sys.executable, "-m", "benchmarks.cpu", "--round", server_dsn]
                command += ["--jobs", str(jobs), "--requests", str(requests)]
                command += ["--seed", str(number)]
                done = subprocess.run(
                    command,
                    env=dict(os.environ, PYTHONPATH=path),
                    cwd=scratch,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if done.returncode != 0:
                    raise RuntimeError(f"a round of {trees[index]} failed:\n{done.stderr[-2000:]}")
                results[index].append(json.loads(done.stdout.splitlines()[-1]))
    return results


# -- the table ----------------------------------------------------------------------------------

TARGETS = (
    # (measure, ours, floor, target ratio or 0 for information)
    ("live door, thread writer: CPU we add per step", "thread.added", "sdk.cpu", 0.5),
    ("live door, process writer: CPU we add per step", "process.added", "sdk.cpu", 0.5),
    ("live door: BatchSpanProcessor's added CPU per step", "batch.added", "sdk.cpu", 0.0),
    ("live door, thread writer: PostgreSQL CPU per step", "thread.pg", "thread.copy", 1.5),
    ("live door, process writer: PostgreSQL CPU per step", "process.pg", "process.copy", 1.5),
    ("collect over HTTP: receiver CPU per span", "http.cpu", "decode.cpu", 3.0),
    ("collect over gRPC: receiver CPU per span", "grpc.cpu", "decode.cpu", 3.0),
    ("collect over HTTP: PostgreSQL CPU per span", "http.pg", "http.copy", 2.0),
    ("collect over gRPC: PostgreSQL CPU per span", "grpc.pg", "grpc.copy", 2.0),
)
FLOORS = {
    "sdk.cpu": "the SDK's own CPU per step",
    "decode.cpu": "decoding alone",
    "thread.copy": "COPY of its rows",
    "process.copy": "COPY of its rows",
    "http.copy": "COPY of its rows",
    "grpc.copy": "COPY of its rows",
}


def best(results: list[dict[str, float]]) -> dict[str, float]:
    """The minimum of each figure over the rounds, and what the writers add to the SDK."""
    out = {name: min(result[name] for result in results) for name in results[0]}
    for name in ("thread", "process", "batch"):
        out[f"{name}.added"] = out[f"{name}.cpu"] - out["sdk.cpu"]
    out["e2e"] = out["sdk.wall"] / out["thread.wall"]
    return out


def rows(results: list[list[dict[str, float]]], labels: Sequence[str]) -> list[Row]:
    """The issue's table for the first tree; with a baseline, each figure beside the other
    tree's too."""
    figures = [best(found) for found in results]
    now = figures[0]
    note = f"min of {len(results[0])} rounds"
    out = []
    for measure, ours, floor, target in TARGETS:
        ratio = now[ours] / now[floor]
        out.append(
            Row(
                "38",
                measure,
                f"{now[ours] * US:.1f} us",
                f"{FLOORS[floor]} {now[floor] * US:.1f} us ({note})",
                fmt_ratio(ratio),
                f"<= {target}x" if target else "",
                verdict(ratio <= target) if target else "info",
            )
        )
    out.append(
        Row(
            "38",
            "live door, thread writer: end to end vs the SDK alone (wall, first span to flush)",
            f"{now['thread.wall'] * US:.1f} us a step",
            f"SDK alone {now['sdk.wall'] * US:.1f} us",
            fmt_ratio(now["e2e"]),
            ">= 0.67x",
            verdict(now["e2e"] >= 0.67),
        )
    )
    for other, found, label in zip(figures[1:], results[1:], labels[1:], strict=True):
        for measure, ours, _, _ in TARGETS:
            paired = median(
                [
                    _in_round(a, ours) / _in_round(b, ours)
                    for a, b in zip(results[0], found, strict=True)
                ]
            )
            out.append(
                Row(
                    "38",
                    f"{measure}: {labels[0]} vs {label}",
                    f"{now[ours] * US:.1f} us",
                    f"{other[ours] * US:.1f} us; median of the rounds' ratios {paired:.2f}x",
                    fmt_ratio(now[ours] / other[ours]),
                )
            )
    return out


def _in_round(result: dict[str, float], name: str) -> float:
    """A figure of one round (what a writer adds: its CPU less the same round's SDK alone)."""
    if name.endswith(".added"):
        return result[name.replace(".added", ".cpu")] - result["sdk.cpu"]
    return result[name]


def run(
    server_dsn: str, *, quick: bool, baseline: Path | None = None, count: int | None = None
) -> list[Row]:
    trees = [ROOT] + ([baseline] if baseline else [])
    labels = ["this tree"] + ([baseline.name] if baseline else [])
    jobs, requests = (1_000, 4) if quick else (3_000, 10)
    count = count or (2 if quick else 5)
    return rows(rounds(server_dsn, trees, count=count, jobs=jobs, requests=requests), labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="loopback server DSN (default: embedded PostgreSQL)")
    parser.add_argument("--quick", action="store_true", help="smaller runs: a smoke check")
    parser.add_argument("--baseline", type=Path, help="another checkout to measure beside")
    parser.add_argument("--rounds", type=int, help="rounds per tree (5; --quick 2)")
    parser.add_argument("--round", metavar="SERVER_DSN", help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, default=3_000, help=argparse.SUPPRESS)
    parser.add_argument("--requests", type=int, default=10, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.round:
        found = one_round(args.round, jobs=args.jobs, requests=args.requests, seed=args.seed)
        print(json.dumps(found))
        return
    with server(args.dsn) as server_dsn:
        for row in run(server_dsn, quick=args.quick, baseline=args.baseline, count=args.rounds):
            print(
                f"{row.measure:78} {row.value:>12}  {row.compared:48} {row.ratio:>6} {row.verdict}"
            )


if __name__ == "__main__":
    main()
