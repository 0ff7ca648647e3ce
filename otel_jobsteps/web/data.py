"""The web page's reads: one short READ ONLY connection per request, queries from ``web.sql``.

No state lives between requests, so a database that comes back needs no repair here."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from .._core.limits import after_prefix
from .._pg.db import Record, connection_kwargs, fetch, session
from .._pg.step_stats import (
    RetryTax,
    StepStat,
    StepVersion,
    Thresholds,
    read_retry_tax,
    read_step_stats,
    read_step_versions,
)
from .._pg.times import read_any_time
from ..errors import DatabaseUnavailableError, describe
from ..query import (
    TAG_SCAN_PER_JOB,
    AttemptDiff,
    AttemptGap,
    AttemptSummary,
    JobDetail,
    JobLogEntry,
    JobSummary,
    LogLine,
    attempt_diff,
    job_detail,
    list_jobs,
    read_attempts,
    read_log_lines,
    stalled_count,
    window_start,
)
from ..sql import qualified_queries
from .layout import Cursor
from .overdue import Baseline, Limits

__all__ = [
    "JobPage",
    "JobRow",
    "JobsPage",
    "OpenStep",
    "Reader",
    "RetryTax",
    "StatusCounts",
    "StepFailure",
    "StepStat",
    "after_prefix",
    "listed_counts",
]

APPLICATION_NAME = "otel_jobsteps_web"
CONNECT_TIMEOUT_S = 3.0
JOBS_ROWS_PER_JOB = 8  # what one jobs_page read takes of each index per job asked for (web.sql)
JOBS_ROW_BUDGET = 1600
# A jobs page reads at most this often and this many rows of each index, then links Older.
JOBS_MAX_READS = 4
COUNT_CAP = 1_000  # the status counts stop here: each is an index range read, at most this long
LINES_SHOWN = 2_000  # a step's log lines on its page (the newest): 1,000 a step are kept


@dataclass(frozen=True, slots=True)
class JobRow(JobSummary):
    """A job on the jobs page, by its latest attempt: ``active_at`` is the job's newest row
    change, ``attempts`` how many attempts it has rows of."""

    active_at: datetime
    attempts: int
    open_step_seen_at: datetime | None


@dataclass(frozen=True, slots=True)
class JobsPage:
    """One page of jobs and the cursor of the next (None on the last page)."""

    jobs: list[JobRow]
    next_cursor: Cursor | None
    as_of: datetime

    @property
    def searched_to(self) -> datetime | None:
        """How far back this page looked when it found fewer jobs than asked for and older
        changes remain unread; None when it read everything or filled the page."""
        cursor = self.next_cursor
        return cursor.at if cursor is not None and cursor.domain is None else None


@dataclass(frozen=True, slots=True)
class StatusCounts(Record):
    """Attempts ended in a window by status and the steps open now, each capped at
    `COUNT_CAP` (a count at the cap reads "at least"); or, of a filtered list, the jobs
    listed by their latest attempt's status (`listed_counts`)."""

    completed: int
    failed: int
    running: int


@dataclass(frozen=True, slots=True)
class JobPage:
    """Everything the job page draws, read in one snapshot: the attempts listed (`JobDetail`),
    their rows and final rows, how many attempts the job has and where the others are."""

    domain: str
    job_id: str
    attempts: tuple[AttemptSummary, ...]
    rows: list[dict[str, Any]]
    logs: list[JobLogEntry]
    as_of: datetime
    lines: list[LogLine]  # the selected attempt's, of the selected step and between steps
    attempt_count: int
    attempt_gaps: tuple[AttemptGap, ...]
    stalled_count: int  # over every attempt


@dataclass(frozen=True, slots=True)
class OpenStep(Record):
    """An open step of the fleet, with its last sign of life (``seen_at``)."""

    domain: str
    job_id: str
    job_type: str | None
    attempt: int
    step_key: str
    detail: dict[str, Any] | None
    started_at: datetime
    seen_at: datetime
    as_of: datetime
    total: int
    overdue: bool  # running longer than its baseline allows (web/overdue.py)


@dataclass(frozen=True, slots=True)
class StepFailure(Record):
    """A failed step row."""

    domain: str
    job_id: str
    attempt: int
    step_key: str
    message: str | None
    detail: dict[str, Any] | None
    started_at: datetime
    ended_at: datetime


class Reader:
    """Reads for the pages and the JSON API, on ``dsn`` in ``schema``."""

    def __init__(self, dsn: str, *, schema: str = "public") -> None:
        self.dsn = dsn
        self.schema = schema
        self._queries = qualified_queries("web.sql", schema)

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        options = connection_kwargs(connect_timeout_s=CONNECT_TIMEOUT_S)
        options["application_name"] = APPLICATION_NAME
        try:
            conn = psycopg.connect(self.dsn, **options)
        except psycopg.OperationalError as error:
            raise DatabaseUnavailableError(f"database unreachable: {describe(error)}") from None
        read_any_time(conn)
        with conn:
            conn.read_only = True  # every transaction begins READ ONLY
            yield conn

    @contextmanager
    def snapshot(self) -> Iterator[psycopg.Connection[Any]]:
        """A READ ONLY connection in one snapshot of ``schema``: what every page read runs on."""
        with self._connection() as conn, session(conn, schema=self.schema, snapshot=True):
            # As list_jobs: JIT compiling these overestimated reads costs more than running them.
            conn.execute("SET LOCAL jit = off")
            yield conn

    def jobs_page(
        self,
        *,
        domain: str | None,
        job_type: str | None,
        status: str | None,
        since: timedelta | None,
        cursor: Cursor | None,
        limit: int,
    ) -> JobsPage:
        """A page of jobs, newest activity first, below ``cursor``; a page a filter leaves short
        reads older changes, in the same snapshot, within the budget (``JOBS_*``)."""
        filters = {"domain": domain, "job_type": job_type, "status": status, "limit": limit}
        return self._floored_page("jobs_page", filters, since, cursor)

    def find_jobs(
        self, prefix: str, *, domain: str | None, cursor: Cursor | None = None, limit: int
    ) -> JobsPage:
        """Jobs whose id is or starts with ``prefix``, in every domain or in ``domain``, in
        (domain, job id) order after ``cursor``'s job."""
        with self.snapshot() as conn:
            now = _server_now(conn)
            params: dict[str, Any] = {"prefix": prefix, "upper": after_prefix(prefix)}
            after = cursor if cursor is not None and cursor.domain is not None else None
            params.update(
                domain=domain,
                after_domain=after.domain if after else None,
                after_job=after.job_id if after else None,
                limit=limit + 1,  # one more than shown: whether a next page exists
            )
            jobs = fetch(conn, self._queries["find_jobs"], params, JobRow, prepare=False)
        last = jobs[limit - 1] if len(jobs) > limit else None
        following = None if last is None else Cursor(None, last.domain, last.job_id)
        return JobsPage(jobs[:limit], following, now)

    def tagged_jobs(
        self,
        tag: tuple[str, str],
        *,
        domain: str | None,
        job_type: str | None,
        status: str | None,
        since: timedelta | None,
        cursor: Cursor | None = None,
        limit: int,
    ) -> JobsPage:
        """Jobs with an attempt tagged ``tag`` (name, value) started within ``since``, the
        newest tagged start first, below ``cursor``; read as `jobs_page` is."""
        filters = {
            "tag_name": tag[0],
            "tag_value": tag[1],
            "domain": domain,
            "job_type": job_type,
            "status": status,
            "scan": limit * TAG_SCAN_PER_JOB,
            "limit": limit,
        }
        return self._floored_page("tagged_jobs", filters, since, cursor)

    def _floored_page(
        self,
        query: str,
        filters: dict[str, Any],
        since: timedelta | None,
        cursor: Cursor | None,
    ) -> JobsPage:
        """A page of a query that reports how deep its bounded scans are complete (floor_at):
        read again below the floor while the page is short, within the budget."""
        limit: int = filters["limit"]
        reads = max(1, min(JOBS_MAX_READS, JOBS_ROW_BUDGET // (JOBS_ROWS_PER_JOB * limit)))
        jobs: list[JobRow] = []
        with self.snapshot() as conn, conn.cursor(row_factory=dict_row) as cur:
            params = {
                **filters,
                "since_at": window_start(conn, since),
                "before_at": cursor.at if cursor else None,
                "before_domain": cursor.domain if cursor else None,
                "before_job_id": cursor.job_id if cursor else None,
            }
            for _ in range(reads):
                # Planned for the window's start: the partitioned layout's old children are
                # skipped.
                found = cur.execute(self._queries[query], params, prepare=False).fetchall()
                jobs += [_job_row(row) for row in found if row["domain"] is not None]
                floor = found[0]["floor_at"]
                if len(jobs) >= limit or floor is None:
                    break
                # the jobs of the next read all changed last at or below the floor
                params.update(before_at=floor, before_domain=None, before_job_id=None)
        jobs = jobs[:limit]
        return JobsPage(jobs, _next_cursor(jobs, limit, floor), found[0]["as_of"])

    def status_counts(self, since: timedelta | None) -> StatusCounts:
        """Attempts ended COMPLETED and FAILED since ``since`` ago and steps open now, each
        counted up to `COUNT_CAP`."""
        with self.snapshot() as conn:
            params = {"since_at": window_start(conn, since), "cap": COUNT_CAP}
            return fetch(conn, self._queries["status_counts"], params, StatusCounts)[0]

    def job_page(
        self,
        domain: str,
        job_id: str,
        drawn: RowChooser,
        *,
        attempt: int | None = None,
        step: str | None = None,
        before_attempt: int | None = None,
    ) -> JobPage | None:
        """A job's listed attempts (`job_detail`'s), their rows, final rows and the log lines of
        ``attempt`` and ``step``, in one snapshot (None without rows); details only of the rows
        ``drawn`` picks."""
        key = {"domain": domain, "job_id": job_id}
        # the read API's statements (the list_jobs fragment does not matter to them)
        read_side = qualified_queries("read.sql", self.schema, (("in_domain", ""),))
        with self.snapshot() as conn:
            listed = read_attempts(conn, read_side, key, attempt=attempt, before=before_attempt)
            if listed is None:
                return None
            shown = {**key, "attempts": listed.numbers}
            with conn.cursor(row_factory=dict_row) as cur:
                rows = cur.execute(self._queries["job_rows"], shown).fetchall()
            logs = fetch(conn, self._queries["job_logs"], shown, JobLogEntry)
            attempts = listed.attempts
            chosen = attempt if attempt is not None else attempts[-1].attempt
            scope = {**key, "attempt": chosen, "every": False, "step_key": step}
            lines = read_log_lines(conn, read_side, {**scope, "limit": LINES_SHOWN})
            page = JobPage(
                domain,
                job_id,
                attempts,
                rows,
                logs,
                listed.as_of,
                lines,
                listed.count,
                listed.gaps,
                stalled_count(conn, read_side, key),
            )
            wanted = {**key, "ids": sorted(drawn(page))}
            with conn.cursor(row_factory=dict_row) as cur:
                found_details = cur.execute(self._queries["job_row_details"], wanted).fetchall()
        details = {row["id"]: row for row in found_details}
        for row in rows:
            row.update(details.get(row["id"]) or _NO_DETAIL)
        return page

    def open_steps(self, min_silence: timedelta, limit: int, limits: Limits) -> list[OpenStep]:
        """Open steps silent for at least ``min_silence``, longest silent first, each overdue
        or not by ``limits`` (`Baselines.limits`)."""
        params = {"older_than": min_silence, "limit": limit, **limits}
        with self.snapshot() as conn:
            return fetch(conn, self._queries["open_steps"], params, OpenStep)

    def open_step_gauges(self, silent_after: timedelta, limits: Limits) -> list[tuple[Any, ...]]:
        """(domain, job type, step key, open steps, of them silent for ``silent_after``, of
        them overdue by ``limits``)."""
        with self.snapshot() as conn:
            params = {"silent_after": silent_after, **limits}
            return conn.execute(self._queries["open_step_gauges"], params).fetchall()

    def step_baselines(self, window: timedelta, min_samples: int) -> list[Baseline]:
        """Per job type and step key with ``min_samples`` completed in the last ``window``:
        the p99 of their durations (web/overdue.py caches it)."""
        with self.snapshot() as conn:
            params = {"since_at": window_start(conn, window), "min_samples": min_samples}
            return fetch(conn, self._queries["step_baselines"], params, Baseline, prepare=False)

    def step_stats(self, since: timedelta) -> list[StepStat]:
        """Per job type and step key: closed steps over the last ``since``."""
        with self.snapshot() as conn:
            return read_step_stats(conn, self.schema, window_start(conn, since))

    def retry_tax(self, since: timedelta) -> list[RetryTax]:
        """Per job type and step key: the retry tax of the attempts failed in the last ``since``."""
        with self.snapshot() as conn:
            return read_retry_tax(conn, self.schema, window_start(conn, since))

    def step_versions(self, since: timedelta, thresholds: Thresholds) -> list[StepVersion]:
        """Per job type, step key and release: closed steps over the last ``since``, each
        version flagged by ``thresholds`` against the previous one."""
        with self.snapshot() as conn:
            return read_step_versions(conn, self.schema, window_start(conn, since), thresholds)

    def step_failures(
        self, job_type: str | None, step_key: str, since: timedelta, limit: int
    ) -> list[StepFailure]:
        """The latest failures of one step of one job type over the last ``since``."""
        with self.snapshot() as conn:
            params = {
                "job_type": job_type,
                "step_key": step_key,
                "since_at": window_start(conn, since),
                "limit": limit,
            }
            return fetch(conn, self._queries["step_failures"], params, StepFailure, prepare=False)

    def job_detail(
        self, domain: str, job_id: str, attempt: int | None, before_attempt: int | None
    ) -> JobDetail | None:
        """The read API's `job_detail`, on a read-only connection."""
        with self._connection() as conn:
            return job_detail(
                conn, domain, job_id, attempt, schema=self.schema, before_attempt=before_attempt
            )

    def attempt_diff(self, domain: str, job_id: str, a: int, b: int) -> AttemptDiff | None:
        """The read API's `attempt_diff`, on a read-only connection."""
        with self._connection() as conn:
            return attempt_diff(conn, domain, job_id, a, b, schema=self.schema)

    def list_jobs(self, **filters: Any) -> list[JobSummary]:
        """The read API's `list_jobs`, on a read-only connection."""
        with self._connection() as conn:
            return list_jobs(conn, schema=self.schema, **filters)


_NO_DETAIL = {"detail": None, "message": None, "span_id": None}
RowChooser = Callable[[JobPage], Iterable[int]]


def listed_counts(jobs: Iterable[JobRow]) -> StatusCounts:
    """The latest attempts of ``jobs`` by status: what a filtered list counts."""
    found = Counter(job.status for job in jobs)
    return StatusCounts(found["COMPLETED"], found["FAILED"], found["RUNNING"])


def _server_now(conn: psycopg.Connection[Any]) -> datetime:
    row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


_JOB_FIELDS = [f.name for f in fields(JobRow)]


def _job_row(row: dict[str, Any]) -> JobRow:
    return JobRow(**{name: row[name] for name in _JOB_FIELDS})


def _next_cursor(jobs: list[JobRow], limit: int, floor: datetime | None) -> Cursor | None:
    if len(jobs) >= limit:
        last = jobs[-1]
        return Cursor(last.active_at, last.domain, last.job_id)
    return Cursor(floor) if floor is not None else None
