"""The receiver's database side: a request's spans are staged and their jobs' rows derived, in
one transaction, before the request is answered.

Rows are a function of a job's spans: each request locks its traces (``otlp_trace``, sorted),
places every span in the attempt it belongs to (`place`), locks the jobs touched (``otlp_job``,
sorted), keeps its new spans in ``otlp_span``, replaces the rows of those jobs' attempts that are
not settled by a derivation from all their staged spans, whichever traces and requests they
came in (`derive.job_commands`), and commits. So a 200 means durable, a duplicate changes
nothing, and any split, order or receiver gives the same rows. An attempt is settled on its
own once it has its final row, no span of it is open and its job had no span for
``settle_after_s`` (or for ``settle_open_after_s`` whatever it waits for): its spans lose their
bodies, and a later copy or child of them is a late copy (counted, dropped). A new attempt is new
work whenever it comes. Spans placed in no job for ``settle_open_after_s`` are dropped (counted).
"""

from __future__ import annotations

import json
import queue
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

from ..attributes import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID
from ..batch import Batch
from ..errors import ConfigurationError, SchemaNotMigratedError, describe
from ..facts import SpanFacts
from ..metrics import Committed
from ..recorder import DEFAULT_MAX_OPEN_ATTEMPTS, JobStarted, StepRecorder
from ..schema import check_writable_tables
from ..sql import qualified_queries
from ..stats import Stats
from ..store import StepStore, rejects_row
from .decode import decode_span
from .derive import job_commands
from .place import JOB, Attempt, Skeleton, place, skeleton
from .settings import CollectSettings

__all__ = ["Receipt", "Staging", "StagingUnavailable"]

_RETRIED = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
_TRANSACTION_ATTEMPTS = 5


class StagingUnavailable(Exception):
    """The database cannot take the spans now (answered 503: the client retries later)."""


@dataclass(frozen=True, slots=True)
class Receipt:
    """What a request changed: spans new to the staging table, copies of spans staged before,
    late copies of settled traces (dropped), and spans over their trace's limit (rejected)."""

    staged: int
    duplicates: int
    late: int
    rejected: int = 0


_Key = tuple[str, int, int]  # trace, signed span id, phase
_Row = tuple[str, int, int, SpanFacts, bytes]  # the key, facts, as received
_Job = tuple[str, str]  # domain, job id


_ID_MASK = (1 << 64) - 1  # a signed bigint's bits as the span id


def _signed(span_id: int) -> int:
    return span_id - (1 << 64) if span_id >= 1 << 63 else span_id


@dataclass(slots=True)
class _Staged:
    """A span of a locked trace as staged (from its skeleton row) or new in this request."""

    skeleton: Skeleton
    place: Attempt | None
    gone: bool = False  # its attempt is settled: only the row is kept
    new: _Row | None = None


def _job_start(attempt: Attempt, trace: str, span_id: int, start_ns: int) -> SpanFacts:
    """A settled attempt's job span as a start marker: all a derivation needs of it now."""
    domain, job_id, number = attempt
    names = {JOB_DOMAIN: domain, JOB_ID: job_id, JOB_ATTEMPT: number}
    start = start_ns & _ID_MASK  # kept signed, as the ids: OTLP times reach 2**64 - 1
    return SpanFacts(int(trace, 16), span_id & _ID_MASK, 0, "settled attempt", start, 0, names)


class Staging:
    """Stages received spans and derives rows; one instance per receiver process, thread-safe.

    ``settings.connections`` stores (each one connection) serve requests in parallel.
    """

    def __init__(
        self,
        settings: CollectSettings,
        *,
        stats: Stats | None = None,
        on_committed: Callable[[Committed], None] = lambda committed: None,
    ) -> None:
        self.settings = settings
        self._on_committed = on_committed  # what a request's commit closed and finished anew
        self.settled_at = time.monotonic()  # when the last settle pass ended (its lag metric)
        self._queries = qualified_queries("ingest.sql", settings.schema)
        self._pause_s = min(1.0, settings.connect_timeout_s)
        self._down_until = 0.0
        self.stats = stats or Stats()
        self._stores: queue.LifoQueue[StepStore] = queue.LifoQueue()
        for _ in range(settings.connections):
            self._stores.put(
                StepStore(
                    settings.dsn,
                    schema=settings.schema,
                    connect_timeout_s=settings.connect_timeout_s,
                )
            )

    def resting(self) -> bool:
        """Whether the database failed a moment ago: requests are refused without trying."""
        return time.monotonic() < self._down_until

    @contextmanager
    def _store(self) -> Iterator[StepStore]:
        store = self._stores.get()
        try:
            yield store
        finally:
            self._stores.put(store)

    def receive(self, spans: Sequence[SpanFacts], wire: Sequence[bytes]) -> Receipt:
        """Stage ``spans`` (``wire``: each as received) and derive their traces' rows; durable
        when this returns.

        Raises `StagingUnavailable` when the database cannot be reached or keeps failing.
        """
        if not spans:
            return Receipt(0, 0, 0)
        if self.resting():
            raise StagingUnavailable("the database was unreachable a moment ago")
        rows = sorted(
            (
                (format(s.trace_id, "032x"), _signed(s.span_id), 1 if s.end_ns else 0, s, body)
                for s, body in zip(spans, wire, strict=True)
            ),
            key=lambda row: row[:3],
        )
        with self._store() as store:
            for attempt in range(_TRANSACTION_ATTEMPTS):
                try:
                    receipt, committed = self._receive(store, rows)
                except _RETRIED as error:
                    if attempt + 1 == _TRANSACTION_ATTEMPTS:
                        raise StagingUnavailable(
                            f"gave up after {attempt + 1} tries: {error}"
                        ) from None
                except psycopg.OperationalError as error:
                    raise self._unavailable(store, error) from None
                except psycopg.Error as error:
                    # Rights revoked, a table altered: answered 503 so the exporter keeps the
                    # spans and retries (a 500 is not retried: they would be lost), and logged.
                    self.stats.problem("database_error", error)
                    raise StagingUnavailable(describe(error)) from None
                else:
                    self.stats.add("spans_staged", receipt.staged)
                    self.stats.add("spans_duplicate", receipt.duplicates)
                    self.stats.add("spans_late", receipt.late)
                    self._on_committed(committed)
                    return receipt
        raise AssertionError("unreachable")

    def ready(self) -> None:
        """Raise `StagingUnavailable` unless a connection is open or opens now: checked (after
        `resting`) before a request's body is decoded, so a database that is away costs no
        decoding memory."""
        with self._store() as store:
            try:
                store.connection()
            except psycopg.OperationalError as error:
                raise self._unavailable(store, error) from None

    def _unavailable(self, store: StepStore, error: BaseException) -> StagingUnavailable:
        store.close()
        # Answer at once for a moment instead of every request waiting to connect.
        self._down_until = time.monotonic() + self._pause_s
        return StagingUnavailable(describe(error))

    def _receive(self, store: StepStore, rows: list[_Row]) -> tuple[Receipt, Committed]:
        """Stage and derive in one transaction; what it closed and finished that no earlier
        derivation had (the metrics count each step and attempt once)."""
        conn = store.connection()
        queries = self._queries
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(queries["share_move_lock"], {"schema": self.settings.schema})
            traces = sorted({row[0] for row in rows})
            cur.execute(queries["lock_traces"], {"trace_id": traces})
            counts: dict[str, int] = dict(cur.fetchall())
            cur.execute(queries["trace_skeletons"], {"trace_id": traces})
            staged = self._skeletons(cur.fetchall())
            unique = {row[:3]: row for row in reversed(rows)}  # the first copy of a span wins
            fresh = [row for key, row in sorted(unique.items()) if key not in staged]
            copies = [key for key in unique if key in staged]
            late = sum(1 for key in copies if staged[key].gone)
            duplicates = len(rows) - len(unique) + len(copies) - late
            kept = self._within_limit(fresh, counts)
            over, fresh = len(fresh) - len(kept), kept
            for row in fresh:
                staged[row[:3]] = _Staged(skeleton(row[3], self.settings.mappings), None, new=row)
            moved = self._place(staged)
            jobs = sorted(
                {(p[0], p[1]) for span in staged.values() if span.new and (p := span.place)}
                | {(p[0], p[1]) for key in moved for p in moved[key] if p is not None}
            )
            settled: set[Attempt] = set()
            attempts: set[Attempt] = set()
            new_jobs: set[_Job] = set()  # jobs new in this request
            started: list[SpanFacts] = []  # the job spans' starts of settled attempts
            if jobs:
                job_columns = {"domain": [j[0] for j in jobs], "job_id": [j[1] for j in jobs]}
                cur.execute(queries["lock_jobs"], job_columns)
                new_jobs.update((domain, job_id) for domain, job_id, new in cur if new)
                cur.execute(queries["job_attempts"], job_columns)
                for domain, job_id, attempt, is_settled, trace, span_id, start_ns in cur:
                    (settled if is_settled else attempts).add((domain, job_id, attempt))
                    if is_settled and start_ns is not None:
                        started.append(
                            _job_start((domain, job_id, attempt), trace, span_id, start_ns)
                        )
            dropped = self._stage(cur, staged, moved, settled)
            late += dropped
            if late:
                self.stats.problem("late_spans", f"{late} spans of settled attempts dropped")
            added = {trace: 0 for trace in traces}
            for span in staged.values():
                if span.new and not span.gone:
                    added[span.new[0]] += 1
            cur.execute(
                queries["note_traces"],
                {"trace_id": traces, "added": [added[trace] for trace in traces]},
            )
            committed = Committed()
            if jobs:
                committed = self._derive(store, cur, jobs, staged, attempts, started, new_jobs)
        return Receipt(len(fresh) - dropped, duplicates, late, over), committed

    @staticmethod
    def _skeletons(found: list[tuple[Any, ...]]) -> dict[_Key, _Staged]:
        staged = {}
        for trace, span_id, phase, parent, kind, own, domain, job_id, attempt, gone in found:
            where = None if domain is None else (domain, job_id, attempt)
            shape = Skeleton(parent & _ID_MASK, kind, None if own is None else tuple(own))
            staged[(trace, span_id, phase)] = _Staged(shape, where, gone)
        return staged

    @staticmethod
    def _place(staged: dict[_Key, _Staged]) -> dict[_Key, tuple[Attempt | None, Attempt | None]]:
        """Place every span of the locked traces; returns the staged ones whose place changed
        (old, new). The ended copy of a span speaks for it (a marker may not name its job)."""
        by_trace: dict[str, dict[int, Skeleton]] = {}
        for (trace, span_id, phase), span in sorted(staged.items()):
            nodes = by_trace.setdefault(trace, {})
            unsigned = span_id & _ID_MASK
            if phase or unsigned not in nodes:
                nodes[unsigned] = span.skeleton
        places = {trace: place(nodes) for trace, nodes in by_trace.items()}
        moved = {}
        for key, span in staged.items():
            where = places[key[0]][key[1] & _ID_MASK]
            if where != span.place:
                if span.new is None:
                    moved[key] = (span.place, where)
                span.place = where
        return moved

    def _stage(
        self,
        cur: psycopg.Cursor[Any],
        staged: dict[_Key, _Staged],
        moved: dict[_Key, tuple[Attempt | None, Attempt | None]],
        settled: set[Attempt],
    ) -> int:
        """Keep the new spans and the new places of staged ones; a span placed in a settled
        attempt is a late one: a new one is dropped, a staged one loses its body. Returns the new
        spans dropped."""
        new = []
        for span in staged.values():
            if span.new is not None:
                span.gone = span.place in settled
                if not span.gone:
                    new.append(span)
        if new:
            rows = [span.new for span in new if span.new is not None]
            owns = [span.skeleton.own for span in new]
            places = [span.place or (None, None, None) for span in new]
            cur.execute(
                self._queries["stage_spans"],
                {
                    "trace_id": [r[0] for r in rows],
                    "span_id": [r[1] for r in rows],
                    "phase": [r[2] for r in rows],
                    "body": [r[4] for r in rows],
                    "parent": [_signed(span.skeleton.parent) for span in new],
                    "kind": [span.skeleton.kind for span in new],
                    "own": [None if own is None else json.dumps(own) for own in owns],
                    "domain": [p[0] for p in places],
                    "job_id": [p[1] for p in places],
                    "attempt": [p[2] for p in places],
                },
            )
        if moved:
            keys = sorted(moved)
            places = [moved[key][1] or (None, None, None) for key in keys]
            for key in keys:
                staged[key].gone = staged[key].gone or staged[key].place in settled
            cur.execute(
                self._queries["place_spans"],
                {
                    "trace_id": [key[0] for key in keys],
                    "span_id": [key[1] for key in keys],
                    "domain": [p[0] for p in places],
                    "job_id": [p[1] for p in places],
                    "attempt": [p[2] for p in places],
                    "late": [staged[key].gone for key in keys],
                },
            )
        return sum(1 for span in staged.values() if span.new is not None) - len(new)

    def _within_limit(self, rows: list[_Row], counts: dict[str, int]) -> list[_Row]:
        """The rows that fit under the per-trace span limit (a trace's skeleton is read with
        every request that touches it: an unbounded trace would make each request dearer): the
        earliest spans are kept, as the processor would have seen them first."""
        room = {trace: self.settings.max_spans_per_trace - count for trace, count in counts.items()}
        kept = []
        for row in sorted(rows, key=lambda row: (row[0], row[3].start_ns, row[1:3])):
            if room[row[0]] > 0:
                room[row[0]] -= 1
                kept.append(row)
        kept.sort(key=lambda row: row[:3])
        if len(kept) < len(rows):
            self.stats.problem(
                "spans_over_trace_limit",
                f"{len(rows) - len(kept)} spans rejected: their trace has "
                f"{self.settings.max_spans_per_trace} spans already",
            )
        return kept

    def _derive(
        self,
        store: StepStore,
        cur: psycopg.Cursor[Any],
        jobs: list[_Job],
        staged: dict[_Key, _Staged],
        attempts: set[Attempt],
        started: list[SpanFacts],
        new_jobs: set[_Job],
    ) -> Committed:
        """Replace the rows of the jobs' attempts that are not settled by a derivation from all
        their staged spans (a new span's facts are at hand; the others are decoded). Settled
        attempts take part by their job span's start only: it abandons earlier attempts still
        open then, as live. Returns what it closed and finished that the rows it replaced had
        not (the metrics count each step and attempt once)."""
        spans: dict[_Job, list[SpanFacts]] = {job: [] for job in jobs}
        for start in started:
            spans[(start.attributes[JOB_DOMAIN], start.attributes[JOB_ID])].append(start)
        markers: dict[Attempt, list[tuple[str, int]]] = {}
        ended: set[tuple[str, int]] = set()
        jobs_ended: set[Attempt] = set()  # attempts whose job span's ended copy is staged
        for key, facts, kind, where in self._job_spans(cur, jobs, staged, new_jobs):
            spans[where[:2]].append(facts)
            attempts.add(where)
            if key[2]:
                ended.add(key[:2])
                if kind == JOB:
                    jobs_ended.add(where)
            else:
                markers.setdefault(where, []).append(key[:2])
        recorder = StepRecorder(
            debounce_ms=0, max_open_attempts=max(DEFAULT_MAX_OPEN_ATTEMPTS, len(attempts) + 1)
        )
        failed: set[_Job] = set()
        starts: list[tuple[str, str, int, int]] = []  # later attempts' starts
        firsts: dict[Attempt, tuple[str, int, int]] = {}  # each attempt's job span start
        for job in jobs:
            try:
                commands = job_commands(
                    spans[job], problem=self.stats.problem, mappings=self.settings.mappings
                )
            except Exception as error:  # noqa: BLE001 - one job must not fail the request
                # Its spans stay staged (the 200 holds) and its rows as they were; a later span
                # of it derives it again.
                self.stats.problem("derive_failed", error)
                failed.add(job)
                continue
            for command in commands:
                recorder.handle(command)
                if isinstance(command, JobStarted):
                    scope = command.scope
                    where = (scope.domain, scope.job_id, scope.attempt)
                    firsts.setdefault(
                        where,
                        (
                            format(scope.trace_id, "032x"),
                            _signed(scope.span_id),
                            _signed(command.start_ns),
                        ),
                    )
                    if scope.attempt > 1:
                        starts.append((*where, command.start_ns))
        derived = sorted(a for a in attempts if (a[0], a[1]) not in failed)
        columns = {
            "domain": [a[0] for a in derived],
            "job_id": [a[1] for a in derived],
            "attempt": [a[2] for a in derived],
        }
        counted: list[tuple[Any, ...]] = []  # closed steps and final rows written before
        if derived:
            cur.execute(self._queries["forget_derived_rows"], columns)
            counted = cur.fetchall()
        committed = Committed()
        batch = recorder.take_batch()
        if batch is not None:
            committed = self._write(store, batch)
        if starts:
            cur.execute(
                self._queries["abandon_settled_attempts"],
                {
                    "domain": [s[0] for s in starts],
                    "job_id": [s[1] for s in starts],
                    "attempt": [s[2] for s in starts],
                    "at_us": [s[3] // 1000 for s in starts],
                },
            )
        waiting = {a for a, found in markers.items() if any(m not in ended for m in found)}
        waiting.update(a for a in derived if a not in jobs_ended)
        cur.execute(
            self._queries["note_attempts"],
            {
                **columns,
                "pending": [a in waiting for a in derived],
                "trace_id": [firsts.get(a, (None,))[0] for a in derived],
                "span_id": [firsts.get(a, (None, None))[1] for a in derived],
                "start_ns": [firsts.get(a, (None, None, None))[2] for a in derived],
            },
        )
        return committed.without(
            [(trace, span) for trace, span, _, _, attempt in counted if attempt is None],
            [(domain, job, attempt) for _, _, domain, job, attempt in counted if attempt],
        )

    def _job_spans(
        self,
        cur: psycopg.Cursor[Any],
        jobs: list[_Job],
        staged: dict[_Key, _Staged],
        new_jobs: set[_Job],
    ) -> Iterator[tuple[_Key, SpanFacts, int, Attempt]]:
        """Every staged span of the jobs' attempts not settled: (key, facts, kind, attempt). A
        new job's are this request's spans, at hand; the others' are read (and decoded, the
        ones this request did not bring)."""
        placed = [(key, span) for key, span in staged.items() if span.place and not span.gone]
        for _, span in placed:
            if span.new is None and span.place:  # placed now, staged before: read its job
                new_jobs.discard(span.place[:2])
        for key, span in placed:
            if span.new is not None and span.place and span.place[:2] in new_jobs:
                yield key, span.new[3], span.skeleton.kind, span.place
        read = [job for job in jobs if job not in new_jobs]
        if not read:
            return
        cur.execute(
            self._queries["job_spans"],
            {"domain": [j[0] for j in read], "job_id": [j[1] for j in read]},
        )
        for trace, span_id, phase, kind, domain, job_id, attempt, body in cur.fetchall():
            known = staged.get((trace, span_id, phase))
            new = None if known is None else known.new
            facts = decode_span(body) if new is None else new[3]
            yield (trace, span_id, phase), facts, kind, (domain, job_id, attempt)

    def _write(self, store: StepStore, batch: Batch) -> Committed:
        """The batch inside the request's transaction (a savepoint); PostgreSQL's refusal of
        one row (hostile data) costs that row only."""
        try:
            return store.write(batch)
        except psycopg.Error as error:
            if not rejects_row(error):
                raise
            return store.write_one_by_one(
                batch, lambda name, e: self.stats.problem("rejected_row", e)
            )

    def check(self) -> None:
        """At startup: the tables must be migrated (`SchemaNotMigratedError`). An unreachable
        database is only logged: the receiver answers 503 until it is back."""
        with self._store() as store:
            try:
                conn = store.connection()
            except psycopg.OperationalError as error:
                self.stats.problem("database_unavailable", describe(error))
                return
            try:
                with conn.transaction():  # the rights first: reading a table needs one
                    missing = conn.execute(
                        self._queries["missing_rights"], {"schema": self.settings.schema}
                    ).fetchall()
                if not missing:
                    check_writable_tables(conn, schema=self.settings.schema)
                    with conn.transaction():
                        conn.execute(self._queries["staging_columns"])
            except (
                SchemaNotMigratedError,
                psycopg.errors.UndefinedTable,
                psycopg.errors.UndefinedColumn,
            ):
                raise SchemaNotMigratedError(
                    f"schema {self.settings.schema!r} lacks the otel_jobsteps tables or the"
                    " OTLP staging tables: run `otel-jobsteps migrate`"
                ) from None
            if missing:
                raise ConfigurationError(
                    "collect needs SELECT, INSERT, UPDATE and DELETE on its tables; this role"
                    f" lacks {', '.join(f'{right} on {table}' for table, right in missing)}"
                )

    def settle(self, *, limit: int = 1000) -> tuple[int, int]:
        """Settle every attempt due and drop the spans that found no job in time, ``limit`` per
        transaction (so the pass keeps up with any rate); returns (attempts, orphans dropped)."""
        settings = self.settings
        params = {
            "after_s": settings.settle_after_s,
            "open_after_s": settings.settle_open_after_s,
            "limit": limit,
        }
        settled = orphans = 0
        for name in ("settle_attempts", "drop_orphans"):
            while True:
                with self._store() as store:
                    try:
                        conn = store.connection()
                        with conn.transaction():
                            found = conn.execute(self._queries[name], params).fetchone()
                    except psycopg.OperationalError as error:
                        raise self._unavailable(store, error) from None
                rounds, spans = found or (0, 0)
                if name == "settle_attempts":
                    settled += rounds
                else:
                    orphans += spans
                if rounds < limit:
                    break
        self.settled_at = time.monotonic()
        if orphans:
            self.stats.problem(
                "orphan_spans",
                f"{orphans} spans dropped: no job span of theirs arrived in time",
            )
        return settled, orphans

    def close(self) -> None:
        while True:
            try:
                self._stores.get_nowait().close()
            except queue.Empty:
                return
