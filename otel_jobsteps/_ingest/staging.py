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
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

from .._batch import Batch
from .._commands import Command, JobStarted, LogRecorded
from .._facts import LogFacts, SpanFacts
from .._metrics import Committed
from .._recorder import DEFAULT_MAX_OPEN_ATTEMPTS, StepRecorder
from .._stats import Stats
from .._store import StepStore, rejects_row
from .._translate import SpanTranslator
from ..attributes import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_EXECUTION,
    JOB_ID,
    JOB_STEP_KEY,
    JOB_TYPE,
)
from ..errors import ConfigurationError, SchemaNotMigratedError, describe
from ..schema import check_writable_tables
from ..sql import qualified_queries
from .decode import decode_span
from .derive import job_commands
from .logs import decode_log_record
from .place import EVENT, JOB, NAMING_EVENT, Attempt, Skeleton, place, skeleton
from .settings import CollectSettings

__all__ = ["Receipt", "Staging", "StagingUnavailable"]

_RETRIED = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
_TRANSACTION_ATTEMPTS = 5
_MAX_UNCERTAIN = 1000  # lost COMMITs' changes kept until txid_status tells (memory bound)


class StagingUnavailable(Exception):
    """The database cannot take the spans now (answered 503: the client retries later)."""


@dataclass(frozen=True, slots=True)
class Receipt:
    """What a request changed: spans (log records) new to the staging table, copies of ones
    staged before, late copies of settled traces (dropped), and spans over their trace's limit
    (rejected); of log records, how many wait for their span."""

    staged: int
    duplicates: int
    late: int
    rejected: int = 0
    waiting: int = 0


_Key = tuple[str, int, int]  # trace, signed span id, phase
_Row = tuple[str, int, int, SpanFacts, bytes]  # the key, facts, as received
_Job = tuple[str, str]  # domain, job id
# A log record: its trace, signed span id, key, place in its request, facts, as received.
_LogRow = tuple[str, int, bytes, int, LogFacts, bytes]
_Places = dict[str, dict[int, Attempt | None]]  # per trace, per span id: its attempt


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
    step_key: str | None = None  # a step span's job.step.key (settled records find it)


@dataclass(slots=True)
class _Transaction:
    """A request's transaction: its id, and what it changed once its statements all ran (kept
    should its COMMIT go unanswered)."""

    txid: int | None = None
    committed: Committed | None = None


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
        # Transactions whose COMMIT went unanswered: counted once txid_status says they landed.
        self._uncertain: list[_Transaction] = []
        self._uncertain_lock = threading.Lock()
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
        receipt = self._transact(rows, [])
        self.stats.add("spans_staged", receipt.staged)
        self.stats.add("spans_duplicate", receipt.duplicates)
        self.stats.add("spans_late", receipt.late)
        return receipt

    def receive_logs(
        self, records: Sequence[LogFacts], wire: Sequence[bytes], keys: Sequence[bytes]
    ) -> Receipt:
        """Stage log ``records`` (``wire``: each as received, ``keys``: `logs.log_key`) and
        derive their jobs' rows; durable when this returns. `StagingUnavailable` as `receive`."""
        if not records:
            return Receipt(0, 0, 0)
        if self.resting():
            raise StagingUnavailable("the database was unreachable a moment ago")
        logs = sorted(
            (
                (format(r.trace_id, "032x"), _signed(r.span_id), key, seq, r, body)
                for seq, (r, body, key) in enumerate(zip(records, wire, keys, strict=True))
            ),
            key=lambda row: row[:3],
        )
        receipt = self._transact([], logs)
        self.stats.add("logs_staged", receipt.staged)
        self.stats.add("logs_duplicate", receipt.duplicates)
        self.stats.add("logs_waiting", receipt.waiting)
        return receipt

    def _transact(self, rows: list[_Row], logs: list[_LogRow]) -> Receipt:
        """`_receive` in a transaction, retried where PostgreSQL ended it as a deadlock's
        victim; `StagingUnavailable` when it cannot be done now."""
        with self._store() as store:
            self._count_uncertain(store)
            for attempt in range(_TRANSACTION_ATTEMPTS):
                transaction = _Transaction()
                try:
                    receipt, committed = self._receive(store, rows, logs, transaction)
                except _RETRIED as error:
                    if attempt + 1 == _TRANSACTION_ATTEMPTS:
                        raise StagingUnavailable(
                            f"gave up after {attempt + 1} tries: {error}"
                        ) from None
                except psycopg.OperationalError as error:
                    if transaction.committed is not None:  # the COMMIT may have landed
                        self._note_uncertain(transaction)
                    raise self._unavailable(store, error) from None
                except psycopg.Error as error:
                    # Rights revoked, a table altered: answered 503 so the exporter keeps the
                    # spans and retries (a 500 is not retried: they would be lost), and logged.
                    self.stats.problem("database_error", error)
                    raise StagingUnavailable(describe(error)) from None
                else:
                    self._on_committed(committed)
                    return receipt
        raise AssertionError("unreachable")

    def _note_uncertain(self, transaction: _Transaction) -> None:
        """Keep a transaction whose COMMIT went unanswered, the newest `_MAX_UNCERTAIN`."""
        with self._uncertain_lock:
            self._uncertain.append(transaction)
            over = len(self._uncertain) - _MAX_UNCERTAIN
            if over > 0:
                del self._uncertain[:over]
        if over > 0:
            self.stats.problem("metrics_uncounted", "a lost COMMIT's rows left out of the metrics")

    def _count_uncertain(self, store: StepStore) -> None:
        """Count what each transaction whose COMMIT went unanswered changed, once the server
        says it committed (its retry is all duplicates: nothing derives it again); forget it
        if it did not; ask again later while it is in progress or the database is away."""
        with self._uncertain_lock:
            uncertain, self._uncertain = self._uncertain, []
        kept = []
        for index, transaction in enumerate(uncertain):
            if transaction.txid is None or transaction.committed is None:
                continue
            try:
                status = store.transaction_status(transaction.txid)
            except psycopg.Error:
                store.close()
                kept.extend(uncertain[index:])
                break
            if status == "in progress":
                kept.append(transaction)
            elif status == "committed":
                self.stats.add("commits_confirmed_after_error")
                self._on_committed(transaction.committed)
        if kept:
            with self._uncertain_lock:
                self._uncertain[:0] = kept

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

    def _receive(
        self, store: StepStore, rows: list[_Row], logs: list[_LogRow], transaction: _Transaction
    ) -> tuple[Receipt, Committed]:
        """Stage and derive in one transaction (noted in ``transaction``); what it closed and
        finished that no earlier derivation had (the metrics count each step and attempt once)."""
        conn = store.connection()
        queries = self._queries
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(queries["share_move_lock"], {"schema": self.settings.schema})
            noted = cur.fetchone()
            transaction.txid = noted[1] if noted else None
            traces = sorted({row[0] for row in rows} | {log[0] for log in logs})
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
                staged[row[:3]] = _Staged(
                    skeleton(row[3], self.settings.mappings), None, new=row, step_key=_key_of(row)
                )
            moved, places = self._place(staged)
            records = _Records(self, cur, traces, logs, places)
            derived = {
                (p[0], p[1]) for span in staged.values() if span.new and (p := span.place)
            } | {(p[0], p[1]) for key in moved for p in moved[key] if p is not None}
            records.choose_direct(derived)
            jobs = sorted(derived | records.jobs())
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
            log_receipt = records.stage(settled)
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
            jobs = sorted(
                {job for job in jobs if job not in records.direct}
                | records.write_direct(store, staged)
            )
            if jobs:
                chosen = set(jobs)
                committed = self._derive(
                    store,
                    cur,
                    jobs,
                    staged,
                    {a for a in attempts if a[:2] in chosen},
                    [
                        s
                        for s in started
                        if (s.attributes[JOB_DOMAIN], s.attributes[JOB_ID]) in chosen
                    ],
                    new_jobs,
                    records,
                )
            records.write_settled(store, staged)
            transaction.committed = committed  # its statements ran: only the COMMIT is left
        if logs:
            return log_receipt, committed
        return Receipt(len(fresh) - dropped, duplicates, late, over), committed

    @staticmethod
    def _skeletons(found: list[tuple[Any, ...]]) -> dict[_Key, _Staged]:
        staged = {}
        for row in found:
            trace, span_id, phase, parent, kind, own, domain, job_id, attempt, gone, key = row
            where = None if domain is None else (domain, job_id, attempt)
            shape = Skeleton(parent & _ID_MASK, kind, None if own is None else tuple(own))
            staged[(trace, span_id, phase)] = _Staged(shape, where, gone, step_key=key)
        return staged

    @staticmethod
    def _place(
        staged: dict[_Key, _Staged],
    ) -> tuple[dict[_Key, tuple[Attempt | None, Attempt | None]], _Places]:
        """Place every span of the locked traces; returns the staged ones whose place changed
        (old, new), and every span's place. The ended copy of a span speaks for it (a marker
        may not name its job)."""
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
        return moved, places

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
                    "step_key": [span.step_key for span in new],
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
        records: _Records,
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
        logs = records.job_logs(jobs)
        settings = self.settings
        recorder = StepRecorder(
            debounce_ms=0,
            max_open_attempts=max(DEFAULT_MAX_OPEN_ATTEMPTS, len(attempts) + 1),
            logs_max_per_step=settings.logs_max_per_step,
        )
        failed: set[_Job] = set()
        starts: list[tuple[str, str, int, int]] = []  # later attempts' starts
        firsts: dict[Attempt, tuple[str, int, int]] = {}  # each attempt's job span start
        for job in jobs:
            try:
                commands = job_commands(
                    spans[job],
                    problem=self.stats.problem,
                    mappings=settings.mappings,
                    logs=logs.get(job, ()),
                    logs_min_severity=settings.logs_min_severity,
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
            [(trace, span, key) for trace, span, key, *_, n in counted if n is None],
            [(domain, job, n) for *_, domain, job, n in counted if n is not None],
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
        with self._store() as store:  # a lost COMMIT's answer, even with no request since
            self._count_uncertain(store)
        settled = orphans = orphan_logs = 0
        for name in ("settle_attempts", "drop_orphans", "drop_orphan_logs"):
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
                elif name == "drop_orphans":
                    orphans += spans
                else:
                    orphan_logs += spans
                if rounds < limit:
                    break
        self.settled_at = time.monotonic()
        if orphans:
            self.stats.problem(
                "orphan_spans",
                f"{orphans} spans dropped: no job span of theirs arrived in time",
            )
        if orphan_logs:
            self.stats.add("logs_orphaned", orphan_logs)
            self.stats.problem(
                "orphan_logs",
                f"{orphan_logs} log records dropped: their span found no job in time",
            )
        return settled, orphans

    def close(self) -> None:
        while True:
            try:
                self._stores.get_nowait().close()
            except queue.Empty:
                return


def _key_of(row: _Row) -> str | None:
    """A new span's ``job.step.key`` as text (kept beside its skeleton)."""
    key = row[3].attributes.get(JOB_STEP_KEY)
    return None if key is None else str(key)


_StagedLog = tuple[LogFacts, tuple[int, bytes]]  # a record and its tie (place in request, key)


class _Records:
    """The log records of one request and those of its traces still waiting: each placed in
    the attempt of the span its context names (or waiting, bounded per trace), staged, and fed
    to their attempts' derivation, or written as LOG rows at once (a settled attempt's, and
    those that are all a job's news in this request)."""

    def __init__(
        self,
        staging: Staging,
        cur: psycopg.Cursor[Any],
        traces: list[str],
        logs: list[_LogRow],
        places: _Places,
    ) -> None:
        self._staging = staging
        self._cur = cur
        self._queries = staging._queries
        self.placed: list[tuple[_LogRow, Attempt]] = []  # new records with a place
        self.waiting: list[_LogRow] = []  # new records whose span is not placed yet
        self.moved: list[tuple[str, int, bytes, int, bytes, Attempt]] = []  # waited, placed now
        self.rejected = 0
        self._new: dict[tuple[str, int, bytes], LogFacts] = {}  # staged now, decoded already
        self._settled: list[tuple[LogFacts, Attempt]] = []
        self._direct: list[tuple[LogFacts, Attempt]] = []  # written without a derivation
        self._translators: dict[tuple[str, Attempt], SpanTranslator] = {}
        self._rebuilt: set[tuple[str, Attempt, int]] = set()  # spans the translators started
        self.direct: set[_Job] = set()
        cur.execute(self._queries["waiting_logs"], {"trace_id": traces})
        still: dict[str, int] = {}
        for trace, span_id, key, seq, body in cur.fetchall():
            where = places.get(trace, {}).get(span_id & _ID_MASK)
            if where is None:
                still[trace] = still.get(trace, 0) + 1
            else:
                self.moved.append((trace, span_id, key, seq, body, where))
        limit = staging.settings.max_waiting_logs_per_trace
        for log in logs:
            where = places.get(log[0], {}).get(log[1] & _ID_MASK)
            if where is not None:
                self.placed.append((log, where))
            elif still.get(log[0], 0) < limit:
                still[log[0]] = still.get(log[0], 0) + 1
                self.waiting.append(log)
            else:
                self.rejected += 1

    def jobs(self) -> set[_Job]:
        return {p[:2] for _, p in self.placed} | {m[5][:2] for m in self.moved}

    def choose_direct(self, derived: set[_Job]) -> None:
        """The jobs whose only news are this request's records, none a progress event: their
        LOG rows can be written as they come, without deriving the job again (a LOG row
        depends only on its record and the step its span lies in), unless a cap says no."""
        progress = {where[:2] for log, where in self.placed if log[4].event_name == "progress"}
        waited = {m[5][:2] for m in self.moved}
        self.direct = {where[:2] for _, where in self.placed} - progress - waited - derived

    def stage(self, settled: set[Attempt]) -> Receipt:
        """Keep the new records (those of a settled attempt without a body: their LOG rows are
        written now) and the places of waiting ones that found their span."""
        rows: list[tuple[_LogRow, Attempt | None]] = [*self.placed]
        rows += [(log, None) for log in self.waiting]
        new: set[tuple[str, int, bytes]] = set()
        if rows:
            places = [where or (None, None, None) for _, where in rows]
            self._cur.execute(
                self._queries["stage_logs"],
                {
                    "trace_id": [log[0] for log, _ in rows],
                    "span_id": [log[1] for log, _ in rows],
                    "key": [log[2] for log, _ in rows],
                    "seq": [log[3] for log, _ in rows],
                    "body": [None if where in settled else log[5] for log, where in rows],
                    "domain": [p[0] for p in places],
                    "job_id": [p[1] for p in places],
                    "attempt": [p[2] for p in places],
                },
            )
            new = {(trace, span_id, bytes(key)) for trace, span_id, key in self._cur.fetchall()}
        for log, where in self.placed:
            if log[:3] in new:
                if where in settled:
                    self._settled.append((log[4], where))
                else:
                    self._new[log[:3]] = log[4]
                    if where[:2] in self.direct:
                        self._direct.append((log[4], where))
        if self.moved:
            moved = self.moved
            self._cur.execute(
                self._queries["place_logs"],
                {
                    "trace_id": [m[0] for m in moved],
                    "span_id": [m[1] for m in moved],
                    "key": [m[2] for m in moved],
                    "domain": [m[5][0] for m in moved],
                    "job_id": [m[5][1] for m in moved],
                    "attempt": [m[5][2] for m in moved],
                    "settled": [m[5] in settled for m in moved],
                },
            )
            self._settled += [(decode_log_record(m[4]), m[5]) for m in moved if m[5] in settled]
        waiting = sum(1 for log in self.waiting if log[:3] in new)
        return Receipt(len(new), len(rows) - len(new), 0, self.rejected, waiting)

    def job_logs(self, jobs: list[_Job]) -> dict[_Job, list[_StagedLog]]:
        """Every staged record of the jobs' attempts that are not settled, with its tie."""
        found: dict[_Job, list[_StagedLog]] = {}
        self._cur.execute(
            self._queries["job_logs"],
            {"domain": [j[0] for j in jobs], "job_id": [j[1] for j in jobs]},
        )
        for trace, span_id, key, seq, domain, job_id, body in self._cur.fetchall():
            key = bytes(key)
            facts = self._new.get((trace, span_id, key))
            if facts is None:
                facts = decode_log_record(body)
            found.setdefault((domain, job_id), []).append((facts, (seq, key)))
        return found

    def write_direct(self, store: StepStore, staged: dict[_Key, _Staged]) -> set[_Job]:
        """The LOG rows of the direct jobs' new records, if every one of their steps stays
        within its cap and each attempt has a row naming its execution; returns the jobs that
        must be derived instead (nothing of theirs was written)."""
        return self._write_lines(store, staged, self._direct, settled=False)

    def write_settled(self, store: StepStore, staged: dict[_Key, _Staged]) -> None:
        """The LOG rows of records whose attempt is settled: each in the step its context lies
        in, under the per-step cap (the lines over it are counted), without deriving the
        attempt again."""
        self._write_lines(store, staged, self._settled, settled=True)

    def _write_lines(
        self,
        store: StepStore,
        staged: dict[_Key, _Staged],
        items: list[tuple[LogFacts, Attempt]],
        *,
        settled: bool,
    ) -> set[_Job]:
        """Records -> LOG rows without a derivation: each translated in its context rebuilt
        from the staged skeletons (its attempt's job span, the step its span lies in)."""
        if not items:
            return set()
        settings = self._staging.settings
        cap = settings.logs_max_per_step
        attempts = sorted({where for _, where in items})
        columns = {
            "domain": [a[0] for a in attempts],
            "job_id": [a[1] for a in attempts],
            "attempt": [a[2] for a in attempts],
        }
        self._cur.execute(self._queries["attempt_names"], columns)
        names = {(d, j, a): (t, e) for d, j, a, t, e in self._cur.fetchall()}
        self._cur.execute(self._queries["attempt_log_counts"], columns)
        counts = {(d, j, a, k): n for d, j, a, k, n in self._cur.fetchall()}
        nodes: dict[tuple[str, int], _Staged] = {}
        for (trace, span_id, phase), span in staged.items():
            if phase or (trace, span_id) not in nodes:
                nodes[(trace, span_id)] = span
        lines: list[tuple[Attempt, LogRecorded]] = []
        fallback: set[_Job] = set()
        for facts, where in sorted(items, key=lambda item: item[0].time_ns):
            if not settled and names.get(where, (None, None))[1] is None:
                fallback.add(where[:2])  # no row names its execution yet: derive it
                continue
            commands = self._settled_commands(facts, where, nodes, names)
            if commands is None:
                if not settled:
                    fallback.add(where[:2])
                continue
            for command in commands:
                if isinstance(command, LogRecorded):  # progress of a closed step: nothing
                    lines.append((where, command))
        recorder = StepRecorder(debounce_ms=0, logs_max_per_step=cap)
        if settled:  # the lines past the cap are dropped and counted, as live
            over: dict[tuple[str, str, int, str | None], list[int]] = {}
            for where, command in lines:
                count = (*where, command.key)
                if counts.get(count, 0) >= cap:
                    dropped = over.setdefault(count, [0, 0])
                    dropped[0] += 1
                    dropped[1] = max(dropped[1], command.time_ns // 1000)
                    continue
                counts[count] = counts.get(count, 0) + 1
                recorder.handle(command)
            if over:
                self._staging.stats.add("logs_over_cap", sum(n for n, _ in over.values()))
                self._count_dropped(over, names, cap)
        else:  # a step that would pass its cap is derived: the derivation counts what it drops
            for where, command in lines:
                count = (*where, command.key)
                counts[count] = counts.get(count, 0) + 1
                if counts[count] > cap:
                    fallback.add(where[:2])
            for where, command in lines:
                if where[:2] not in fallback:
                    recorder.handle(command)
        batch = recorder.take_batch()
        if batch is not None:
            self._staging._write(store, batch)
        return fallback

    def _count_dropped(
        self,
        over: dict[tuple[str, str, int, str | None], list[int]],
        names: dict[Attempt, tuple[str | None, str | None]],
        cap: int,
    ) -> None:
        """Settled attempts' late lines past the cap: in their step's dropped-count row."""
        keys = sorted(over, key=lambda k: (k[0], k[1], k[2], k[3] or ""))
        self._cur.execute(
            self._queries["count_dropped_lines"],
            {
                "domain": [k[0] for k in keys],
                "job_id": [k[1] for k in keys],
                "attempt": [k[2] for k in keys],
                "step_key": [k[3] for k in keys],
                "dropped": [over[k][0] for k in keys],
                "at_us": [over[k][1] for k in keys],
                "execution": [names.get(k[:3], (None, None))[1] for k in keys],
                "cap": cap,
            },
        )

    def _settled_commands(
        self,
        facts: LogFacts,
        where: Attempt,
        nodes: dict[tuple[str, int], _Staged],
        names: dict[Attempt, tuple[str | None, str | None]],
    ) -> list[Command] | None:
        """The record translated in its context rebuilt from skeletons: its attempt's job span,
        the step its span lies in, and its span (None: the context cannot be rebuilt so). One
        translator per trace and attempt, its spans started once."""
        trace = format(facts.trace_id, "032x")
        translator = self._translators.get((trace, where))
        if translator is None:
            translator = self._translators[(trace, where)] = SpanTranslator(
                problem=self._staging.stats.problem,
                logs_min_severity=self._staging.settings.logs_min_severity,
            )
        if (trace, where, facts.span_id) in self._rebuilt:
            return translator.log(facts)
        chain: list[tuple[int, _Staged]] = []
        span_id = _signed(facts.span_id)
        while (trace, span_id) in nodes and len(chain) < 1000:
            node = nodes[(trace, span_id)]
            chain.append((span_id & _ID_MASK, node))
            if node.skeleton.kind == JOB:
                break
            span_id = _signed(node.skeleton.parent)
        if not chain or chain[-1][1].skeleton.kind != JOB:
            return None
        if any(node.skeleton.kind in (EVENT, NAMING_EVENT) for _, node in chain):
            return None  # an event span's context: the derivation decides
        job_type, execution = names.get(where, (None, None))
        job_span = chain[-1][0]
        attributes: dict[str, Any] = {JOB_DOMAIN: where[0], JOB_ID: where[1], JOB_ATTEMPT: where[2]}
        if job_type is not None:
            attributes[JOB_TYPE] = job_type
        attributes[JOB_EXECUTION] = execution or f"{trace}:{job_span:016x}"
        parent = 0
        for span_id, node in reversed(chain):
            names_of = attributes if span_id == job_span else {}
            if node.step_key is not None and span_id != job_span:
                names_of = {JOB_STEP_KEY: node.step_key}
            translator.started(SpanFacts(facts.trace_id, span_id, parent, "", 1, 0, names_of))
            self._rebuilt.add((trace, where, span_id))
            parent = span_id
        return translator.log(facts)
