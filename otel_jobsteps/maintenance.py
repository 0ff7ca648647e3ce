"""Operator maintenance: `sweep` closes steps of executions gone silent, `prune` drops old jobs.

Both run set-based statements from ``sql/maintenance.sql`` and take a connection string or an
open psycopg connection (used as is, never closed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from ._pg.db import Record, Target, borrowed_connection, fetch, session
from ._telemetry.log import logger
from .errors import ConfigurationError
from .schema import is_partitioned
from .sql import qualified_queries

__all__ = ["PruneResult", "SweptStep", "prune", "sweep"]

T = TypeVar("T")
_RETRIED = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
_TRANSACTION_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class SweptStep(Record):
    """What `sweep` settled (or, in a dry run, would settle): a silent open step, or an attempt
    whose execution went silent between steps.

    ``closes_step`` True: an open step, closed FAILED ``abandoned``; its ``last_seen_at``
    (GREATEST of its start and last heartbeat) becomes its ``ended_at``. False: an attempt with
    no open step and no final row; ``step_key`` is its last step and ``started_at`` that step's
    start, ``last_seen_at`` its last sign of life (a start, end or heartbeat of its steps).
    ``writes_job_log`` says whether the attempt gets its FAILED ``abandoned`` job_log row here
    (False when it already had one: the first final row wins).
    """

    domain: str
    job_id: str
    attempt: int
    step_key: str
    execution_id: str | None
    started_at: datetime
    last_seen_at: datetime
    writes_job_log: bool
    closes_step: bool = True


@dataclass(frozen=True, slots=True)
class PruneResult(Record):
    """What `prune` deleted (or, in a dry run, would delete).

    The counts include the rows of ``partitions``, the intervals of the partitioned layout
    whose child tables were dropped whole.
    """

    job_logs: int
    job_events: int
    batches: int
    dry_run: bool
    partitions: int = 0
    settled_attempts: int = 0  # collect's settled attempts forgotten (not counted by a dry run)


@dataclass(frozen=True, slots=True)
class _Counts:
    job_logs: int
    job_events: int


def _positive(name: str, value: timedelta) -> None:
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ConfigurationError(f"{name} must be a positive timedelta, got {value!r}")


def sweep(
    conninfo_or_connection: Target,
    older_than: timedelta,
    *,
    dry_run: bool = False,
    schema: str = "public",
) -> list[SweptStep]:
    """Settle what has shown no sign of life for ``older_than``: open steps, and attempts
    whose execution went silent between steps.

    An open step's last sign of life is its start or its latest heartbeat, whichever is later.
    Each silent step is closed FAILED with message ``abandoned`` at that moment, and its
    attempt gets a FAILED ``abandoned`` job_log row unless it has one. An attempt without an
    open step and without a final row (its worker died between steps) gets that row too, once
    the starts, ends and heartbeats of its steps are all older than ``older_than`` (the writer
    keeps beating on the last step of an attempt that goes on). Rows a live writer is updating
    are left alone. Choose ``older_than`` well above the heartbeat interval: what is settled
    here stays settled when its execution turns out to be alive. ``dry_run`` reports what
    would be settled and rolls it back.
    """
    _positive("older_than", older_than)
    queries = qualified_queries("maintenance.sql", schema)
    with session(conninfo_or_connection, schema=schema) as conn:
        # Same misestimate of open steps as list_jobs (see there): JIT would cost seconds.
        conn.execute("SET LOCAL jit = off")
        with conn.transaction(force_rollback=dry_run):
            return fetch(conn, queries["sweep_silent_steps"], {"older_than": older_than}, SweptStep)


def prune(
    conninfo_or_connection: Target,
    older_than: timedelta,
    *,
    dry_run: bool = False,
    batch_size: int = 1000,
    schema: str = "public",
) -> PruneResult:
    """Delete finished attempts whose job_log row is older than ``older_than``, with their rows.

    Works in transactions of at most ``batch_size`` job_log rows (oldest first) and their
    attempts' job_event rows. An open step is never deleted, nor any row of an attempt that
    still has one; attempts without a job_log row are kept (`sweep` first settles the
    abandoned ones). ``dry_run`` counts what a run would delete now, reading only (a replica
    or a SELECT-only role will do).

    Attempts `collect` has not settled are kept (it may derive their rows again). Then what
    `collect` keeps of OTLP attempts settled before the cutoff is forgotten, in batches too, with
    its idle jobs and traces. A transaction PostgreSQL ends as a deadlock's victim is retried.

    With the partitioned layout, finished attempts' job_event rows first move out of the
    current table into their interval's child, then the children of intervals that ended
    before the cutoff are dropped whole; the batches then delete the job_log rows past the
    cutoff and the job_event rows of the interval at the edge. A dry run counts the same rows
    (children included) without moving or dropping anything.
    """
    _positive("older_than", older_than)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigurationError(f"batch_size must be a positive integer, got {batch_size!r}")
    queries = qualified_queries("maintenance.sql", schema)
    params = {"older_than": older_than, "batch_size": batch_size}
    logs = events = batches = 0
    if dry_run:
        return _count_prunable(conninfo_or_connection, queries["prunable_rows"], params, schema)
    partitions = 0
    with borrowed_connection(conninfo_or_connection) as conn:
        if is_partitioned(conn, schema=schema):
            partitions, events = _drop_partitions(conn, older_than, batch_size, schema)
        while True:
            # One transaction per batch: locks stay short, and what is done stays done.
            (counts,) = _retrying(
                conn, schema, lambda: fetch(conn, queries["prune_batch"], params, _Counts)
            )
            logs += counts.job_logs
            events += counts.job_events
            if counts.job_logs == 0:
                break
            batches += 1
            if counts.job_logs < batch_size:
                break
        attempts = _forget_settled(conn, queries, params, schema)
    return PruneResult(
        logs, events, batches, dry_run=False, partitions=partitions, settled_attempts=attempts
    )


def _forget_settled(
    conn: psycopg.Connection[Any], queries: dict[str, sql.Composed], params: Any, schema: str
) -> int:
    """Forget what `collect` keeps of settled OTLP attempts, then idle jobs and traces, in
    batches; the number of attempts forgotten."""
    attempts = 0
    for name in ("prune_settled_attempts", "prune_idle_otlp_jobs", "prune_idle_otlp_traces"):
        while True:
            count = partial(_row_count, conn, queries[name], params)
            forgotten = _retrying(conn, schema, count)
            attempts += forgotten if name == "prune_settled_attempts" else 0
            if forgotten < params["batch_size"]:
                break
    return attempts


def _row_count(conn: psycopg.Connection[Any], query: sql.Composed, params: Any) -> int:
    return conn.execute(query, params).rowcount


def _fetch_one(conn: psycopg.Connection[Any], query: sql.Composed, params: Any) -> Any:
    return conn.execute(query, params).fetchone()


def _retrying(conn: psycopg.Connection[Any], schema: str, work: Callable[[], T]) -> T:
    """``work`` in one transaction, run again when PostgreSQL ends it as a deadlock's victim
    (collect retries its own the same way): a prune beside collect does not fail for that."""
    for attempt in range(_TRANSACTION_ATTEMPTS):
        try:
            with session(conn, schema=schema):
                return work()
        except _RETRIED:
            if attempt + 1 == _TRANSACTION_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


@dataclass(frozen=True, slots=True)
class _Prunable(Record):
    job_logs: int
    job_events: int
    scanned: int
    last_created_at: datetime | None
    last_id: int | None


def _count_prunable(
    target: Target, query: sql.Composed, params: dict[str, Any], schema: str
) -> PruneResult:
    """A dry run: what prune's batches would delete, read in batches in one snapshot."""
    logs = events = 0
    after: dict[str, Any] = {"after_created_at": "-infinity", "after_id": 0}
    with session(target, schema=schema, snapshot=True) as conn:
        while True:
            (batch,) = fetch(conn, query, {**params, **after}, _Prunable)
            logs += batch.job_logs
            events += batch.job_events
            if batch.scanned < params["batch_size"]:
                return PruneResult(logs, events, 0, dry_run=True)
            after = {"after_created_at": batch.last_created_at, "after_id": batch.last_id}


def _drop_partitions(
    conn: psycopg.Connection[Any], older_than: timedelta, batch_size: int, schema: str
) -> tuple[int, int]:
    """Move finished attempts into their interval's child, then drop the children past the
    cutoff (functions of ``sql/partitioned.sql``); returns (intervals dropped, rows they held).
    """
    prepare = sql.SQL("SELECT {}()").format(
        sql.Identifier(schema, "otel_jobsteps_prepare_partitions")
    )
    archive = sql.SQL("SELECT * FROM {}(%s, NULL, %s, %s)").format(
        sql.Identifier(schema, "otel_jobsteps_archive")
    )
    drop = sql.SQL(
        "SELECT count(*), COALESCE(sum(job_events), 0) FROM {}(now() - %s::interval)"
    ).format(sql.Identifier(schema, "otel_jobsteps_drop_partitions"))
    try:
        # Its own transaction: creating a child waits for the transactions reading the
        # children; a long reader makes it give up rather than queue everyone behind it.
        with conn.transaction():
            conn.execute("SET LOCAL lock_timeout = '2s'")
            conn.execute(prepare)
    except psycopg.errors.LockNotAvailable:
        logger.warning("prune: children not created this time (readers held them); retry later")
    after_at, after_id = datetime.min.replace(tzinfo=timezone.utc), 0
    while True:
        # One transaction per window of rows, as the deletes: the mover's lock is held briefly.
        window = (batch_size, after_at, after_id)
        moved = _retrying(conn, schema, partial(_fetch_one, conn, archive, window))
        if not moved or not moved[3]:  # no row left to look at
            break
        after_at, after_id = moved[0], moved[1]
    with session(conn, schema=schema):
        dropped = conn.execute(drop, (older_than,)).fetchone()
    assert dropped is not None  # an aggregate always returns its row
    return int(dropped[0]), int(dropped[1])
