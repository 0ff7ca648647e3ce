"""The read side: `job_detail`, `attempt_diff` and `list_jobs`, computed in SQL (``sql/read.sql``).

Results are frozen dataclasses; ``to_dict()`` gives a JSON-ready dict (ISO 8601 timestamps,
durations in seconds). Both functions take a connection string or an open psycopg connection,
which they use as is and never close; None reads from $OTEL_JOBSTEPS_READ_DSN (a replica: its
rows lag the primary by the replay delay), else $OTEL_JOBSTEPS_DSN.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

if TYPE_CHECKING:
    from typing_extensions import LiteralString

from ._core.vocabulary import (  # STATUSES public from here too (CLI and web filter)
    LOG,
    MAX_ATTEMPT,
    STATUSES,
)
from ._pg.db import Record, Target, fetch, session
from ._pg.times import read_any_time
from .errors import ConfigurationError
from .sql import qualified_queries

__all__ = [
    "FAILED_ATTEMPTS",
    "MAX_LOG_LINES",
    "NEWEST_ATTEMPTS",
    "STATUSES",
    "TAG_SCAN_PER_JOB",
    "ActivityFollower",
    "AttemptDiff",
    "AttemptGap",
    "AttemptList",
    "AttemptRow",
    "AttemptSide",
    "AttemptSummary",
    "EventRecord",
    "JobActivity",
    "JobDetail",
    "JobLogEntry",
    "JobSummary",
    "LogLine",
    "StepPair",
    "StepRecord",
    "attempt_diff",
    "job_detail",
    "list_jobs",
    "parse_tag",
    "read_attempts",
    "read_target",
    "stalled_count",
    "window_start",
]

_TAG_SEPARATOR = re.compile("[=:]")
TAG_SCAN_PER_JOB = 8  # tagged attempts a tag search reads per job asked for
NEWEST_ATTEMPTS = 20
"""The newest attempts `job_detail` lists (below ``before_attempt``); the first, the latest,
the one asked for and the newest `FAILED_ATTEMPTS` failed ones are listed too."""
FAILED_ATTEMPTS = 20
MAX_LOG_LINES = 5_000
"""The most log lines `job_detail` returns for an attempt (its newest): 1,000 per step is
the writer's default cap."""


def parse_tag(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` or ``NAME:VALUE`` as (name, value): split at the first ``=`` or ``:``
    (a stored tag name holds neither, its value may); `ConfigurationError` without a
    separator or a name."""
    found = _TAG_SEPARATOR.search(text)
    if found is None or found.start() == 0:
        raise ConfigurationError(f"a tag is NAME=VALUE (or NAME:VALUE), got {text!r}")
    return text[: found.start()], text[found.end() :]


@dataclass(frozen=True, slots=True)
class AttemptSummary(Record):
    """One attempt of a job and its outcome.

    ``status`` is the attempt's ``job_log`` status, or RUNNING while it has none.
    ``last_step`` is the open step, else the step the attempt ended in; ``error`` the error
    its ``job_log`` detail names. ``processing_started_at`` is the start of its first step and
    ``last_activity_at`` its latest row change (start, close, heartbeat or final log).
    """

    attempt: int
    job_type: str | None
    status: str
    reason: str | None
    error: str | None
    last_step: str | None
    open_step: str | None
    started_at: datetime | None
    processing_started_at: datetime | None
    ended_at: datetime | None
    last_activity_at: datetime | None
    stalled_count: int


@dataclass(frozen=True, slots=True)
class AttemptGap(Record):
    """Attempts a job's list leaves out: ``count`` of them, numbered below ``before`` and above
    the attempt listed before it; ``before_attempt=before`` lists the newest of them."""

    before: int
    count: int


@dataclass(frozen=True, slots=True)
class AttemptList:
    """The attempts of a job a read lists (`job_attempt_choice`), how many it has in all, and
    where the others are."""

    attempts: tuple[AttemptSummary, ...]
    count: int
    gaps: tuple[AttemptGap, ...]
    as_of: datetime

    @property
    def numbers(self) -> list[int]:
        return [a.attempt for a in self.attempts]


@dataclass(frozen=True, slots=True)
class JobSummary(AttemptSummary):
    """The latest attempt of a job, as `list_jobs` returns it."""

    domain: str
    job_id: str


@dataclass(frozen=True, slots=True)
class StepRecord(Record):
    """A STEP row: ``status`` RUNNING until ``ended_at``; ``duration`` None while running."""

    key: str
    status: str
    started_at: datetime
    ended_at: datetime | None
    duration: timedelta | None
    detail: dict[str, Any] | None
    message: str | None


@dataclass(frozen=True, slots=True)
class AttemptRow(Record):
    """What every row written for one attempt has: its number, its detail, when it was written."""

    attempt: int
    detail: dict[str, Any] | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class EventRecord(AttemptRow):
    """An ordinary (non-STEP) event of the job: its type and message."""

    type: str
    message: str | None


@dataclass(frozen=True, slots=True)
class JobLogEntry(AttemptRow):
    """The final row of a finished attempt: its status, why, and the trace it ran in."""

    status: str
    reason: str | None
    trace_id: str | None


@dataclass(frozen=True, slots=True)
class LogLine(Record):
    """A LOG row: a log record of the attempt, in ``step_key``'s step (None: between steps or in
    the job span's own context), at ``time``; ``message`` is its body as text. A line saying
    how many lines the step's cap dropped has ``dropped`` set."""

    attempt: int
    step_key: str | None
    time: datetime
    severity: str | None
    message: str | None
    attributes: dict[str, Any] | None
    dropped: int | None
    trace_id: str | None
    span_id: str | None

    @classmethod
    def from_row(cls, row: dict[str, Any], *, time: datetime, detail: Any) -> LogLine:
        """A line from a row's columns and its ``detail`` (``{"severity": ..., "attributes":
        {...}, "dropped": N}``; anything else there is ignored)."""
        found = detail if isinstance(detail, dict) else {}
        severity, attributes, dropped = (
            found.get(k) for k in ("severity", "attributes", "dropped")
        )
        return cls(
            attempt=row["attempt"],
            step_key=row.get("step_key"),
            time=time,
            severity=severity if isinstance(severity, str) else None,
            message=row.get("message"),
            attributes=attributes if isinstance(attributes, dict) else None,
            dropped=dropped if isinstance(dropped, int) and not isinstance(dropped, bool) else None,
            trace_id=row.get("trace_id"),
            span_id=row.get("span_id"),
        )


@dataclass(frozen=True, slots=True)
class JobDetail(Record):
    """What `job_detail` returns: one job, its attempts, and one attempt in detail.

    ``attempts`` lists the newest `NEWEST_ATTEMPTS` (below ``before_attempt`` when asked), the
    first, the latest, ``current_attempt`` and the newest `FAILED_ATTEMPTS` failed ones, oldest
    first; ``attempt_count`` is how many the job has and ``attempt_gaps`` where the others are.
    ``current_attempt`` is the attempt described by ``steps``, ``processing_started_at``
    (start of its first step) and ``log``; ``events`` are those of the attempts listed and
    ``stalled_count`` counts every attempt's, only ordinary events (STEP rows are never
    counted). ``logs`` are the log lines (LOG rows) of ``current_attempt`` in time order, the
    newest `MAX_LOG_LINES`; they are never steps or events. ``as_of`` is the server's time of
    the read, the end of the bar of a step still running.
    """

    domain: str
    job_id: str
    job_type: str | None
    current_attempt: int
    attempts: tuple[AttemptSummary, ...]
    steps: tuple[StepRecord, ...]
    events: tuple[EventRecord, ...]
    stalled_count: int
    processing_started_at: datetime | None
    log: JobLogEntry | None
    as_of: datetime
    attempt_count: int
    attempt_gaps: tuple[AttemptGap, ...]
    logs: tuple[LogLine, ...] = ()

    @property
    def attempt(self) -> AttemptSummary:
        """The summary of ``current_attempt``."""
        return next(a for a in self.attempts if a.attempt == self.current_attempt)


def _queries(schema: str, *, in_domain: bool = False) -> dict[str, sql.Composed]:
    condition: LiteralString = "AND domain = %(domain)s" if in_domain else ""
    return qualified_queries("read.sql", schema, (("in_domain", condition),))


def read_target(target: Target | None) -> Target:
    """``target`` as given; None: $OTEL_JOBSTEPS_READ_DSN (a replica), else $OTEL_JOBSTEPS_DSN."""
    if target is not None:
        return target
    dsn = os.environ.get("OTEL_JOBSTEPS_READ_DSN") or os.environ.get("OTEL_JOBSTEPS_DSN")
    if not dsn:
        raise ConfigurationError(
            "no database: pass one or set OTEL_JOBSTEPS_READ_DSN or OTEL_JOBSTEPS_DSN"
        )
    return dsn


def job_detail(
    conninfo_or_connection: Target | None,
    domain: str,
    job_id: str | int,
    attempt: int | None = None,
    *,
    schema: str = "public",
    before_attempt: int | None = None,
) -> JobDetail | None:
    """Read one job: its attempts, and the latest (or the asked) attempt's steps and log.

    A job retried many times lists some of its attempts (`JobDetail`): ``before_attempt`` pages
    to older ones, as its ``attempt_gaps`` say. Returns None when the job, or the asked attempt,
    has no row. Queries run in one read-only snapshot, so the attempts, steps, events and log
    agree with each other.
    """
    queries = _queries(schema)
    key = {"domain": domain, "job_id": str(job_id)}
    with session(read_target(conninfo_or_connection), schema=schema, snapshot=True) as conn:
        listed = read_attempts(conn, queries, key, attempt=attempt, before=before_attempt)
        if listed is None:
            return None
        attempts = listed.attempts
        chosen = attempt if attempt is not None else attempts[-1].attempt
        summary = next((a for a in attempts if a.attempt == chosen), None)
        if summary is None:
            return None
        scope = {**key, "attempt": chosen}
        steps = fetch(conn, queries["job_steps"], scope, StepRecord)
        shown = {**key, "attempts": listed.numbers}
        events = fetch(conn, queries["job_events"], shown, EventRecord)
        logs = fetch(conn, queries["job_log_entry"], scope, JobLogEntry)
        every = {"every": True, "step_key": None, "limit": MAX_LOG_LINES}
        lines = read_log_lines(conn, queries, {**scope, **every})
        stalled = stalled_count(conn, queries, key)
    return JobDetail(
        domain=domain,
        job_id=str(job_id),
        job_type=next((a.job_type for a in reversed(attempts) if a.job_type), None),
        current_attempt=chosen,
        attempts=attempts,
        steps=tuple(steps),
        events=tuple(events),
        stalled_count=stalled,
        processing_started_at=summary.processing_started_at,
        log=logs[0] if logs else None,
        as_of=listed.as_of,
        attempt_count=listed.count,
        attempt_gaps=listed.gaps,
        logs=tuple(lines),
    )


@dataclass(frozen=True, slots=True)
class AttemptSide(Record):
    """One attempt of an `AttemptDiff`: its outcome and why it failed, and its tags.

    ``status``, ``reason``, ``error`` and ``started_at`` / ``ended_at`` are those of its
    `AttemptSummary`; ``detail`` is its final row's detail; ``failed_step`` and
    ``failed_message`` name its last FAILED step and that step's message; ``resource`` the
    ``service.name``, ``service.version``, ``host.name`` and ``service.instance.id`` its job
    span ran under (those known: kept with the final row).
    """

    attempt: int
    status: str
    reason: str | None
    error: str | None
    detail: dict[str, Any] | None
    failed_step: str | None
    failed_message: str | None
    started_at: datetime | None
    ended_at: datetime | None
    tags: dict[str, str]
    resource: dict[str, str]


@dataclass(frozen=True, slots=True)
class StepPair(Record):
    """A step key's ``occurrence``-th run (1 for its first) in attempt a and in attempt b; a
    side is None where that attempt has no such run. ``difference`` is b's duration minus
    a's when both ended."""

    key: str
    occurrence: int
    a_status: str | None
    a_duration: timedelta | None
    a_started_at: datetime | None
    b_status: str | None
    b_duration: timedelta | None
    b_started_at: datetime | None
    difference: timedelta | None


@dataclass(frozen=True, slots=True)
class AttemptDiff(Record):
    """What `attempt_diff` returns: two attempts of one job side by side.

    ``steps`` pairs their steps by key and occurrence, in a's order with b's other steps
    placed where b ran them; ``first_divergence`` is the key of the first pair whose statuses
    differ (a step one attempt never ran counts), None when none does. ``as_of`` is the
    server's time of the read, the end of a step still running.
    """

    domain: str
    job_id: str
    a: AttemptSide
    b: AttemptSide
    steps: tuple[StepPair, ...]
    as_of: datetime

    @property
    def divergence_index(self) -> int | None:
        """The place in ``steps`` of the first pair whose statuses differ."""
        return next((i for i, p in enumerate(self.steps) if p.a_status != p.b_status), None)

    @property
    def first_divergence(self) -> str | None:
        index = self.divergence_index
        return None if index is None else self.steps[index].key

    def to_dict(self) -> dict[str, Any]:
        """The fields and ``first_divergence``, as `Record.to_dict`."""
        return {**Record.to_dict(self), "first_divergence": self.first_divergence}


def attempt_diff(
    conninfo_or_connection: Target | None,
    domain: str,
    job_id: str | int,
    a: int,
    b: int,
    *,
    schema: str = "public",
) -> AttemptDiff | None:
    """Compare attempts ``a`` and ``b`` of one job step by step (`AttemptDiff`), read in one
    snapshot. None when the job has no row of attempt ``a`` or of ``b``; `ConfigurationError`
    when one is not an attempt number (an integer from 1)."""
    for name, number in (("a", a), ("b", b)):
        if isinstance(number, bool) or not isinstance(number, int):
            raise ConfigurationError(f"{name} must be an attempt number, got {number!r}")
        if not 1 <= number <= MAX_ATTEMPT:
            raise ConfigurationError(f"{name} must be an integer from 1 to {MAX_ATTEMPT}")
    queries = _queries(schema)
    key = {"domain": domain, "job_id": str(job_id)}
    with session(read_target(conninfo_or_connection), schema=schema, snapshot=True) as conn:
        with conn.cursor(row_factory=dict_row) as cur:
            read_any_time(cur)  # a caller's connection too
            found = cur.execute(queries["job_attempts"], {**key, "attempts": [a, b]}).fetchall()
            summaries = {row["attempt"]: row for row in found}
            if a not in summaries or b not in summaries:
                return None
            both = {**key, "attempts": [a, b]}
            tags = cur.execute(queries["attempt_tags"], both).fetchall()
            resources = {
                r.pop("attempt"): r for r in cur.execute(queries["attempt_resources"], both)
            }
        steps, logs = {}, {}
        for n in {a, b}:
            scope = {**key, "attempt": n}
            steps[n] = fetch(conn, queries["job_steps"], scope, StepRecord)
            logs[n] = fetch(conn, queries["job_log_entry"], scope, JobLogEntry)
    sides = [
        _side(
            summaries[n],
            steps[n],
            logs[n],
            {t["name"]: t["value"] for t in tags if t["attempt"] == n},
            {k: v for k, v in resources.get(n, {}).items() if v is not None},
        )
        for n in (a, b)
    ]
    pairs = tuple(_align_steps(steps[a], steps[b]))
    return AttemptDiff(domain, str(job_id), sides[0], sides[1], pairs, found[0]["as_of"])


def _side(
    summary: dict[str, Any],
    steps: list[StepRecord],
    logs: list[JobLogEntry],
    tags: dict[str, str],
    resource: dict[str, str],
) -> AttemptSide:
    failed = next((s for s in reversed(steps) if s.status == "FAILED"), None)
    return AttemptSide(
        attempt=summary["attempt"],
        status=summary["status"],
        reason=summary["reason"],
        error=summary["error"],
        detail=logs[0].detail if logs else None,
        failed_step=failed.key if failed else None,
        failed_message=failed.message if failed else None,
        started_at=summary["started_at"],
        ended_at=summary["ended_at"],
        tags=tags,
        resource=resource,
    )


def _align_steps(a: list[StepRecord], b: list[StepRecord]) -> list[StepPair]:
    """The runs of ``a`` and ``b`` paired by (key, occurrence), in a's order; a run of b that
    a lacks comes right after the pairs of the runs b ran before it."""
    a_runs, b_runs = _runs(a), _runs(b)
    b_order = list(b_runs)
    b_place = {run: i for i, run in enumerate(b_order)}
    pairs: list[StepPair] = []
    done = 0  # b's runs placed so far, in b's order
    for run, step in a_runs.items():
        place = b_place.get(run)
        if place is not None:
            for other in b_order[done:place]:
                if other not in a_runs:
                    pairs.append(_pair(other, None, b_runs[other]))
            done = max(done, place + 1)
        pairs.append(_pair(run, step, b_runs.get(run)))
    pairs += [_pair(run, None, b_runs[run]) for run in b_order[done:] if run not in a_runs]
    return pairs


def _runs(steps: list[StepRecord]) -> dict[tuple[str, int], StepRecord]:
    """Each step by (key, occurrence), in the order they started."""
    seen: dict[str, int] = {}
    runs = {}
    for step in steps:
        seen[step.key] = seen.get(step.key, 0) + 1
        runs[step.key, seen[step.key]] = step
    return runs


def _pair(run: tuple[str, int], a: StepRecord | None, b: StepRecord | None) -> StepPair:
    a_took, b_took = (a.duration if a else None), (b.duration if b else None)
    return StepPair(
        key=run[0],
        occurrence=run[1],
        a_status=a.status if a else None,
        a_duration=a_took,
        a_started_at=a.started_at if a else None,
        b_status=b.status if b else None,
        b_duration=b_took,
        b_started_at=b.started_at if b else None,
        difference=b_took - a_took if a_took is not None and b_took is not None else None,
    )


def read_attempts(
    conn: psycopg.Connection[Any],
    queries: dict[str, sql.Composed],
    key: dict[str, str],
    *,
    attempt: int | None,
    before: int | None,
) -> AttemptList | None:
    """The attempts of the job ``key`` a read lists (`JobDetail`), None when it has none."""
    params = {
        **key,
        "attempt": attempt,
        "before": before,
        "newest": NEWEST_ATTEMPTS,
        "failed": FAILED_ATTEMPTS,
    }
    with conn.cursor(row_factory=dict_row) as cur:
        read_any_time(cur)  # a caller's connection too
        places = cur.execute(queries["job_attempt_choice"], params).fetchall()
        if not places:
            return None
        numbers = [row["attempt"] for row in places]
        rows = cur.execute(queries["job_attempts"], {**key, "attempts": numbers}).fetchall()
    names = [f.name for f in fields(AttemptSummary)]
    attempts = tuple(AttemptSummary(**{n: row[n] for n in names}) for row in rows)
    gaps, above = [], 0
    for row in places:
        if row["place"] - above > 1:
            gaps.append(AttemptGap(row["attempt"], row["place"] - above - 1))
        above = row["place"]
    return AttemptList(attempts, places[0]["total"], tuple(gaps), rows[0]["as_of"])


def stalled_count(
    conn: psycopg.Connection[Any], queries: dict[str, sql.Composed], key: dict[str, str]
) -> int:
    """How many STALLED events the job ``key`` has, over all its attempts."""
    row = conn.execute(queries["job_stalled"], key).fetchone()
    assert row is not None
    return int(row[0])


def read_log_lines(
    conn: psycopg.Connection[Any], queries: dict[str, sql.Composed], params: dict[str, Any]
) -> list[LogLine]:
    """The newest ``limit`` LOG rows of one attempt (all if ``every``, else those between steps
    and ``step_key``'s), oldest first."""
    with conn.cursor(row_factory=dict_row) as cur:
        read_any_time(cur)  # a caller's connection too
        rows = cur.execute(queries["job_log_lines"], params).fetchall()
    return [LogLine.from_row(r, time=r["time"], detail=r["detail"]) for r in reversed(rows)]


def list_jobs(
    conninfo_or_connection: Target | None,
    *,
    domain: str | None = None,
    job_type: str | None = None,
    status: str | None = None,
    since: datetime | timedelta | None = None,
    limit: int = 50,
    schema: str = "public",
    tag: tuple[str, str] | None = None,
) -> list[JobSummary]:
    """Recent jobs, each by its latest attempt, the most recently active first.

    ``status`` (RUNNING, COMPLETED or FAILED) and ``job_type`` filter on that latest attempt.
    ``since`` keeps jobs active since then: a datetime, or a timedelta measured back from the
    database server's clock (``since=timedelta(hours=1), status="FAILED"``: what failed in the
    last hour). Without ``since`` every job is a candidate: on big tables, give one.
    ``tag`` (name, value) keeps the jobs with an attempt so tagged that started since ``since``,
    the newest tagged start first (`TAG_SCAN_PER_JOB` tagged attempts read per job asked for).
    """
    if status is not None and status not in STATUSES:
        raise ConfigurationError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigurationError(f"limit must be a positive integer, got {limit!r}")
    # One statement per case: a domain given is an index condition, not a filter.
    queries = _queries(schema, in_domain=domain is not None)
    with session(read_target(conninfo_or_connection), schema=schema) as conn:
        params = {
            "domain": domain,
            "job_type": job_type,
            "status": status,
            "since_at": since if isinstance(since, datetime) else window_start(conn, since),
            "limit": limit,
        }
        # The planner overestimates open steps, so JIT would compile and cost more than the
        # read; SET LOCAL lasts until the end of the (possibly the caller's) transaction.
        conn.execute("SET LOCAL jit = off")
        if tag is not None:
            params.update(tag_name=tag[0], tag_value=tag[1], scan=limit * TAG_SCAN_PER_JOB)
            return fetch(conn, queries["list_tagged_jobs"], params, JobSummary, prepare=False)
        return fetch(conn, queries["list_jobs"], params, JobSummary, prepare=False)


def window_start(conn: psycopg.Connection[Any], ago: timedelta | None) -> datetime | None:
    """The server's ``now() - ago`` in ``conn``'s transaction (None: no window).

    The cutoff that ``now() - interval`` inside the read gave (now() is the transaction's
    start), passed instead as a value: a read planned for its values (``prepare=False``) then
    knows where its window starts, and in the partitioned layout skips the older children.
    """
    if ago is None:
        return None
    row = conn.execute("SELECT now() - %s::interval", (ago,)).fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class JobActivity(Record):
    """A change `ActivityFollower` saw: ``change`` is ``started`` or ``ended`` (a step),
    ``event`` (an ordinary event) or ``log`` (a log line), ``at`` when it happened."""

    change: str
    at: datetime
    domain: str
    job_id: str
    attempt: int
    type: str
    step_key: str | None
    step_status: str | None
    message: str | None
    detail: dict[str, Any] | None


class ActivityFollower:
    """Follows ``job_event`` by polling: rows with an id above the highest seen, and the close
    (``ended_at`` set) of the steps it saw open.

    Ids of a gap below the highest seen id are asked for again for a few polls, so a row from a
    transaction that committed after a later one is still shown.
    """

    MAX_GAP_IDS = 1000
    GAP_POLLS = 10

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        *,
        domain: str | None = None,
        schema: str = "public",
        batch_size: int = 1000,
    ) -> None:
        self._conn = conn
        self._domain = domain
        self._schema = schema
        self._batch_size = batch_size
        self._gaps: dict[int, int] = {}
        with session(conn, schema=schema), conn.cursor() as cur:
            row = cur.execute(_queries(schema)["tail_start"], {"domain": domain}).fetchone()
        assert row is not None
        self._last_id: int = row[0]
        self._open_ids: set[int] = set(row[1])

    @property
    def open_steps(self) -> int:
        """How many steps seen open are being watched for their close."""
        return len(self._open_ids)

    def poll(self) -> list[JobActivity]:
        """The changes since the last poll, in id order (a closed step: in its row's place)."""
        params = {
            "after_id": self._last_id,
            "gap_ids": list(self._gaps),
            "open_ids": list(self._open_ids),
            "domain": self._domain,
            "limit": self._batch_size,
        }
        conn, query = self._conn, _queries(self._schema)["tail_changes"]
        with session(conn, schema=self._schema), conn.cursor(row_factory=dict_row) as cur:
            read_any_time(cur)  # a caller's connection too
            rows = cur.execute(query, params).fetchall()
        self._gaps = {i: n - 1 for i, n in self._gaps.items() if n > 1}
        found: list[JobActivity] = []
        for row in rows:
            found.extend(self._changes(row))
        return found

    def _changes(self, row: dict[str, Any]) -> list[JobActivity]:
        row_id: int = row.pop("id")
        new = row_id > self._last_id or row_id in self._gaps
        self._gaps.pop(row_id, None)
        if row_id > self._last_id:
            missing = range(self._last_id + 1, row_id)
            if len(self._gaps) + len(missing) <= self.MAX_GAP_IDS:
                self._gaps.update(dict.fromkeys(missing, self.GAP_POLLS))
            self._last_id = row_id
        created_at, ended_at = row.pop("created_at"), row.pop("ended_at")
        changes = []
        if row["type"] != "STEP":
            change = "log" if row["type"] == LOG else "event"
            return [JobActivity(change, created_at, **row)] if new else []
        if new:
            changes.append(JobActivity("started", created_at, **row))
        if ended_at is not None:
            self._open_ids.discard(row_id)
            changes.append(JobActivity("ended", ended_at, **row))
        elif new:
            self._open_ids.add(row_id)
        return changes
