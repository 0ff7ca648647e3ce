"""Target 4: the plans of every statement the writer and the read side run, on a big table.

Reads every named block of the package's SQL files but a COPY (queries.sql: the writer;
read.sql and any other: the read side), prepares it on a filled database and prints EXPLAIN
ANALYZE of both its custom plan (planned for these values) and its generic plan (what a
prepared statement falls back to: psycopg prepares a statement after five executions; not for
the windowed reads, which run unprepared). Parameters are realistic: the writer's arrays hold
1,000 open steps sampled from the table, the read side asks about one of its jobs. Writes run
inside a transaction that is rolled back. Any Seq Scan on job_event or job_log is flagged, and
so is a scan of the open-step index without an index condition: it walks every open step (the
big table holds tens of thousands), once per input row when it is the outer side of a loop
(issue 15).

    python -m benchmarks.explain [--dsn DSN] [--rows 5000000] [--database DSN_OF_FILLED_DB]
"""

from __future__ import annotations

import argparse
import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

from .common import Databases, Row, server, verdict

BATCH = 1_000
_NAME = re.compile(r"^-- name: (\w+) --$", re.MULTILINE)
_PLACEHOLDER = re.compile(r"%\((\w+)\)[sbt]")
_IDENTIFIER = re.compile(r"\{(\w+)\}")
_COPY = re.compile(r"^COPY\b", re.MULTILINE)
_SEQ_SCAN = re.compile(r"Seq Scan on (job_event|job_log)\b")
_FILTERED = re.compile(r"Rows Removed by Filter: (\d+)")
_OPEN_STEP_SCAN = re.compile(
    r"^(\s*)(?:->\s+)?Index (?:Only )?Scan.* using job_event_one_open_step\b"
)
WALKS_OPEN_STEPS = "walks every open step"
WIDE_SCAN_ROWS = 10_000
CATEGORIES = {"queries.sql": "writer", "read.sql": "read side"}


@dataclass
class Plan:
    source: str
    name: str
    mode: str  # custom | generic
    text: str
    execution_ms: float | None

    @property
    def problems(self) -> list[str]:
        """What is wrong with the plan: executed seq scans fail; the rest are warnings."""
        if self.text.startswith("could not explain"):
            return ["not explained"]
        found = []
        lines = self.text.splitlines()
        for number, line in enumerate(lines):
            if _walks_open_steps(lines, number):
                found.append(WALKS_OPEN_STEPS)
            if _SEQ_SCAN.search(line):
                found.append("seq scan, never executed" if "never executed" in line else "seq scan")
            if line.strip().startswith("Options:") and "Optimization true" in line:
                found.append("JIT inlining/optimization (estimated cost above jit thresholds)")
            filtered = _FILTERED.search(line)
            if filtered and int(filtered.group(1)) >= WIDE_SCAN_ROWS:
                found.append(f"wide scan: {int(filtered.group(1)):,} rows filtered")
        return found

    @property
    def fails(self) -> bool:
        # Reading every open step is the read side's job ("what is running"), never the writer's.
        failing = {"seq scan", "not explained"}
        if self.category == "writer":
            failing.add(WALKS_OPEN_STEPS)
        return any(p in failing for p in self.problems)

    @property
    def category(self) -> str:
        return CATEGORIES.get(self.source, self.source.removesuffix(".sql"))


def _walks_open_steps(lines: list[str], number: int) -> bool:
    """Whether line ``number`` scans the open-step index with no Index Cond in its node."""
    match = _OPEN_STEP_SCAN.match(lines[number])
    if not match:
        return False
    indent = len(match.group(1))
    for line in lines[number + 1 :]:
        stripped = line.lstrip()
        if len(line) - len(stripped) <= indent or stripped.startswith("->"):
            return True  # the node's details ended without a condition
        if stripped.startswith("Index Cond:"):
            return False
    return True


def statements() -> list[tuple[str, str, str]]:
    """(file, name, SQL) of every named block in the package's SQL files, writer first."""
    folder = resources.files("otel_jobsteps").joinpath("sql")
    files = sorted(
        (entry for entry in folder.iterdir() if entry.name.endswith(".sql")),
        key=lambda entry: (entry.name != "queries.sql", entry.name),
    )
    found = []
    for entry in files:
        parts = _NAME.split(entry.read_text("utf-8"))[1:]
        for name, body in zip(parts[::2], parts[1::2], strict=False):
            if _COPY.search(body):
                continue  # COPY has no plan to explain (copy_events, stage_spans)
            if "{in_domain}" not in body:
                found.append((entry.name, name, body.strip()))
                continue
            # query.py fills this fragment per case: explain both statements.
            for suffix, condition in (("", ""), ("_in_domain", "AND domain = %(domain)s")):
                found.append((entry.name, name + suffix, body.replace("{in_domain}", condition)))
    return found


def _prepared_text(conn: psycopg.Connection[Any], text: str, schema: str) -> tuple[str, list[str]]:
    """The statement with tables qualified and ``%(name)s`` turned into ``$n``, and the names."""
    identifiers = {name: sql.Identifier(schema, name) for name in _IDENTIFIER.findall(text)}
    rendered = sql.SQL(text).format(**identifiers).as_string(conn)
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return _PLACEHOLDER.sub(number, rendered).replace("%%", "%"), names


class Parameters:
    """Realistic values by parameter name, sampled from the filled table."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.open_steps = conn.execute(
            "SELECT domain, job_id, attempt, execution_id, step_key FROM job_event"
            " WHERE type = 'STEP' AND ended_at IS NULL LIMIT %s",
            (BATCH,),
        ).fetchall()
        job = conn.execute(
            "SELECT domain, job_id, attempt FROM job_event WHERE domain = 'bench'"
            " AND type = 'STEP' ORDER BY id DESC LIMIT 1"
        ).fetchone()
        self.job = job or ("bench", "fill-0", 1)
        self.max_id = (conn.execute("SELECT max(id) FROM job_event").fetchone() or (0,))[0] or 0
        self.now_us = int(time.time() * 1e6)

    def values(self, statement: str, names: list[str], types: list[str]) -> list[Any]:
        return [
            self._array(statement, name, kind) if kind.endswith("[]") else self._scalar(name)
            for name, kind in zip(names, types, strict=False)
        ]

    def _array(self, statement: str, name: str, kind: str) -> list[Any]:
        new = statement.startswith("insert")
        rows = self.open_steps or [("bench", "none", 1, "none", "FETCH")]
        count = len(rows)
        columns: dict[str, list[Any]] = {
            "domain": [r[0] for r in rows],
            "job_id": [f"explain-{i}" for i in range(count)] if new else [r[1] for r in rows],
            # attempt N+1 starting is what makes abandon_earlier_attempts look at attempt N
            "attempt": [r[2] + 1 for r in rows]
            if statement.startswith("abandon")
            else [r[2] for r in rows],
            "execution_id": [r[3] for r in rows],
            "step_key": [r[4] for r in rows],
            "job_type": ["bench"] * count,
            "type": ["STEP"] * count,
            "step_status": ["RUNNING"] * count,
            "status": ["COMPLETED"] * count,
            "detail": ['{"done": 2, "total": 4}'] * count,
            "trace_id": [f"{i:032x}" for i in range(count)],
            "span_id": [f"{i:016x}" for i in range(count)],
        }
        if name in ("span_id", "phase") and kind != "text[]":
            return list(range(count))  # OTLP staging keeps span ids and phases as numbers
        if kind == "bytea[]":
            return [b""] * count
        if name in columns:
            return columns[name]
        if name.endswith("_us"):
            return [self.now_us + i for i in range(count)]
        return [None] * count

    def _scalar(self, name: str) -> Any:
        domain, job_id, attempt = self.job
        return {
            "domain": domain,
            "job_id": job_id,
            "attempt": attempt,
            "since_at": datetime.now(timezone.utc) - timedelta(hours=1),
            "step_key": "RENDER",
            "limit": 50,
            "after_id": max(0, self.max_id - 100),
            "after_created_at": "-infinity",
            "older_than": "1 hour",
            "silent_after": "5 minutes",
            "schema": "public",
            "batch_size": 1000,
        }.get(name)


def plan_modes(text: str) -> tuple[str, ...]:
    """The plans a statement can run with: a windowed read (``since_at``) runs unprepared,
    planned for its window each time (`otel_jobsteps.query.window_start`), so never generic."""
    return ("custom",) if "%(since_at)s" in text else ("custom", "generic")


def explain_all(dsn: str, *, schema: str = "public") -> list[Plan]:
    plans: list[Plan] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        parameters = Parameters(conn)
        cursor = psycopg.ClientCursor(conn)
        for source, name, text in statements():
            prepared, names = _prepared_text(conn, text, schema)
            for mode in plan_modes(text):
                try:
                    with conn.transaction(force_rollback=True):
                        conn.execute(
                            sql.SQL("SET LOCAL plan_cache_mode = {}").format(
                                sql.Literal(f"force_{mode}_plan")
                            )
                        )
                        conn.execute(
                            sql.SQL("PREPARE bench_statement AS {}").format(sql.SQL(prepared))
                        )
                        row = conn.execute(
                            "SELECT parameter_types::text[] FROM pg_prepared_statements"
                            " WHERE name = 'bench_statement'"
                        ).fetchone()
                        values = parameters.values(name, names, list(row[0]) if row else [])
                        arguments = ", ".join(["%s"] * len(values))
                        cursor.execute(
                            "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) EXECUTE bench_statement"
                            + (f"({arguments})" if values else ""),
                            values,
                        )
                        text_plan = "\n".join(line for (line,) in cursor.fetchall())
                        conn.execute("DEALLOCATE bench_statement")
                except psycopg.Error as error:
                    text_plan = f"could not explain: {error}"
                    # PREPARE outlives the rolled-back transaction; the next one needs the name.
                    if conn.execute(
                        "SELECT 1 FROM pg_prepared_statements WHERE name = 'bench_statement'"
                    ).fetchone():
                        conn.execute("DEALLOCATE bench_statement")
                executed = re.search(r"Execution Time: ([\d.]+) ms", text_plan)
                plans.append(
                    Plan(
                        source,
                        name,
                        mode,
                        text_plan,
                        float(executed.group(1)) if executed else None,
                    )
                )
    return plans


def print_plans(plans: list[Plan], *, only_flagged: bool = False) -> None:
    for plan in plans:
        if only_flagged and not plan.problems:
            continue
        mark = "; ".join(plan.problems) or "ok"
        print(f"\n=== {plan.source}:{plan.name} ({plan.mode} plan) -- {mark}")
        print(plan.text)


def summary(plans: list[Plan]) -> str:
    lines = []
    for plan in plans:
        took = f"{plan.execution_ms:8.2f} ms" if plan.execution_ms is not None else "       ?   "
        mark = "; ".join(sorted(set(plan.problems))) or "index"
        if plan.text.startswith("could not explain"):
            mark = plan.text.splitlines()[0][:200]
        lines.append(f"  {plan.category:11} {plan.name:26} {plan.mode:7} {took}  {mark}")
    return "\n".join(lines)


def rows(plans: list[Plan], table_rows: int) -> list[Row]:
    out = []
    categories = list(dict.fromkeys(plan.category for plan in plans))
    for category in categories:
        chosen = [p for p in plans if p.category == category]
        failing = [p for p in chosen if p.fails]
        # The target covers what the writer and the read side run; the rest is reported.
        in_target = category in CATEGORIES.values()
        out.append(
            Row(
                "4",
                f"EXPLAIN {category}: {len({p.name for p in chosen})} statements,"
                " custom + generic plans",
                f"{len(failing)} with Seq Scan",
                f"{table_rows:,} rows in job_event",
                "",
                "0",
                verdict(not failing) if in_target else ("warn" if failing else "PASS"),
            )
        )
        for plan in chosen:
            if plan.problems:
                took = f"{plan.execution_ms:.1f} ms" if plan.execution_ms is not None else ""
                out.append(
                    Row(
                        "4",
                        f"  {plan.name} ({plan.mode} plan)",
                        "; ".join(sorted(set(plan.problems))),
                        took,
                        "",
                        "",
                        "FAIL" if plan.fails and in_target else "warn",
                    )
                )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="loopback server DSN (default: embedded PostgreSQL)")
    parser.add_argument("--rows", type=int, default=5_000_000, help="job_event rows to fill")
    parser.add_argument("--database", help="an already filled, migrated database to use as is")
    args = parser.parse_args()
    if args.database:
        plans = explain_all(args.database)
        print_plans(plans)
        print("\n" + summary(plans))
        return
    from .bigtable import fill

    with server(args.dsn) as server_dsn:
        dbs = Databases(server_dsn)
        try:
            dsn = dbs.fresh("explain")
            print(f"filling {args.rows:,} rows:", fill(dsn, args.rows))
            plans = explain_all(dsn)
            print_plans(plans)
            print("\n" + summary(plans))
        finally:
            dbs.close()


if __name__ == "__main__":
    main()
