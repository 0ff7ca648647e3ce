"""The receiver's database side: a request's spans are staged and their traces' rows derived,
in one transaction, before the request is answered.

Rows are a function of a trace's spans: each request locks its traces (``otlp_trace`` rows, in
sorted order), keeps its new spans in ``otlp_span``, replaces the rows an earlier derivation of
those traces wrote with a derivation from all their spans so far, and commits. So a 200 means
durable, a duplicate changes nothing, and any split, order or receiver gives the same rows.
Traces untouched for ``settle_after_s`` are settled: their spans are deleted, late copies of
them ignored; a trace that never had a job span is dropped then (counted, as the processor
ignores spans outside a job scope). A trace that is not whole yet (a span waits for its end or
its job span) is kept for ``settle_open_after_s``.
"""

from __future__ import annotations

import json
import queue
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

from ..batch import Batch
from ..errors import ConfigurationError, SchemaNotMigratedError, describe
from ..facts import SpanFacts
from ..metrics import Committed
from ..recorder import JobEnded, JobStarted, StepRecorder
from ..schema import check_writable_tables
from ..sql import qualified_queries
from ..stats import Stats
from ..store import StepStore, rejects_row
from ..translate import SpanTranslator
from .decode import decode_span
from .derive import trace_commands
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


_Row = tuple[str, int, int, SpanFacts, bytes]  # trace, signed span id, phase, facts, as received


def _signed(span_id: int) -> int:
    return span_id - (1 << 64) if span_id >= 1 << 63 else span_id


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
        self._queries = qualified_queries("ingest.sql", settings.schema)
        self._pause_s = min(1.0, settings.connect_timeout_s)
        self._down_until = 0.0
        self.settled_at = time.monotonic()  # when the last settle pass ended (its lag metric)
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
        committed = Committed()
        queries = self._queries
        with conn.transaction(), conn.cursor() as cur:
            traces = sorted({row[0] for row in rows})
            cur.execute(queries["lock_traces"], {"trace_id": traces})
            state = {trace: (settled, count, written) for trace, settled, count, written in cur}
            live = [row for row in rows if not state[row[0]][0]]
            late = len(rows) - len(live)
            if late:
                self.stats.problem("late_spans", f"{late} spans of settled traces dropped")
            staged: set[tuple[str, int, int]] = set()
            over = 0
            if live:
                # Deduplicated within the request too: the first copy of a span wins.
                unique = {row[:3]: row for row in reversed(live)}
                ordered = self._within_limit(
                    sorted(unique.values(), key=lambda row: row[:3]), state
                )
                over = len(unique) - len(ordered)
                cur.execute(
                    queries["stage_spans"],
                    {
                        "trace_id": [r[0] for r in ordered],
                        "span_id": [r[1] for r in ordered],
                        "phase": [r[2] for r in ordered],
                        "body": [r[4] for r in ordered],
                    },
                )
                staged = {(t, s, p) for t, s, p in cur}
            if staged:
                committed = self._derive(store, cur, rows, staged, state)
        return Receipt(len(staged), len(live) - len(staged) - over, late, over), committed

    def _within_limit(self, rows: list[_Row], state: dict[str, Any]) -> list[_Row]:
        """The rows that fit under the per-trace span limit (every request re-derives its traces
        from all their spans: an unbounded trace would make each request dearer than the last)."""
        room = {
            trace: self.settings.max_spans_per_trace - count
            for trace, (_, count, _) in state.items()
        }
        kept = []
        for row in rows:
            if room[row[0]] > 0:
                room[row[0]] -= 1
                kept.append(row)
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
        rows: list[_Row],
        staged: set[tuple[str, int, int]],
        state: dict[str, tuple[bool, int, Any]],
    ) -> Committed:
        """Replace the rows of every trace that received a new span by a derivation from all;
        returns what the new derivation closed and finished that the one it replaced had not."""
        changed = sorted({key[0] for key in staged})
        spans: dict[str, list[SpanFacts]] = {trace: [] for trace in changed}
        added = Counter(key[0] for key in staged)
        for trace, span_id, phase, facts, _ in rows:
            if (trace, span_id, phase) in staged:
                spans[trace].append(facts)
        earlier = [trace for trace in changed if state[trace][1]]
        derived_before: dict[str, set[int]] = {trace: set() for trace in earlier}
        if earlier:
            cur.execute(self._queries["staged_spans"], {"trace_id": earlier})
            for trace, span_id, phase, body in cur.fetchall():
                if (trace, span_id, phase) not in staged:
                    spans[trace].append(decode_span(body))
                    derived_before[trace].add(span_id & 0xFFFFFFFFFFFFFFFF)
        recorder = StepRecorder(debounce_ms=0)
        replaced: list[str] = []  # traces derived anew: their earlier rows go
        written: dict[str, list[list[Any]] | None] = {}
        whole: dict[str, bool | None] = {}  # None: as it was (its derivation failed)
        # Traces in the order they began: one job's attempts in different traces then meet in
        # the batch as they happened (attempt 1's end before attempt 2's start settles it).
        for trace in sorted(changed, key=lambda t: min(s.start_ns for s in spans[t])):
            translator = SpanTranslator(problem=self.stats.problem)
            try:
                commands, whole[trace] = trace_commands(
                    spans[trace],
                    translator,
                    mappings=self.settings.mappings,
                    derived_before=derived_before.get(trace, ()),
                )
            except Exception as error:  # noqa: BLE001 - one trace must not fail the request
                # Its spans stay staged (the 200 holds) and its rows as they were; a later span
                # of it derives it again.
                self.stats.problem("derive_failed", error)
                written[trace] = state[trace][2]
                whole[trace] = None
                continue
            attempts: dict[tuple[str, str, int], None] = {}
            produced = False
            for command in commands:
                if isinstance(command, (JobStarted, JobEnded)):
                    scope = command.scope
                    attempts[(scope.domain, scope.job_id, scope.attempt)] = None
                recorder.handle(command)
                produced = True
            # NULL until the trace writes a row: then it is no orphan when settled.
            written[trace] = [list(key) for key in attempts] if produced else None
            replaced.append(trace)
        previous = [(*key, trace) for trace in replaced for key in state[trace][2] or ()]
        counted: list[tuple[Any, ...]] = []  # closed steps and final rows written before
        if previous:
            columns = list(zip(*previous, strict=True))
            cur.execute(
                self._queries["forget_derived_rows"],
                {
                    "domain": list(columns[0]),
                    "job_id": list(columns[1]),
                    "attempt": list(columns[2]),
                    "trace_id": list(columns[3]),
                },
            )
            counted = cur.fetchall()
        committed = Committed()
        batch = recorder.take_batch()
        if batch is not None:
            logs = [log for segment in batch.segments for log in segment.job_logs]
            if logs:
                cur.execute(
                    self._queries["forget_abandoned_logs"],
                    {
                        "domain": [log.domain for log in logs],
                        "job_id": [log.job_id for log in logs],
                        "attempt": [log.attempt for log in logs],
                        "end_us": [log.created_us for log in logs],
                    },
                )
                counted.extend((None, None, *key) for key in cur.fetchall())
            committed = self._write(store, batch)
        cur.execute(
            self._queries["note_traces"],
            {
                "trace_id": changed,
                "added": [added[trace] for trace in changed],
                "written": [
                    None if written[trace] is None else json.dumps(written[trace])
                    for trace in changed
                ],
                "whole": [whole[trace] for trace in changed],
            },
        )
        return committed.without(
            [(trace, span) for trace, span, _, _, attempt in counted if attempt is None],
            [
                (domain, job, attempt)
                for _, _, domain, job, attempt in counted
                if attempt is not None
            ],
        )

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
        """Settle every trace due, ``limit`` per transaction (so the pass keeps up with any
        rate of traces); returns (traces, orphan spans dropped)."""
        settled = orphans = 0
        while True:
            with self._store() as store:
                try:
                    conn = store.connection()
                    with conn.transaction():
                        found = conn.execute(
                            self._queries["settle_traces"],
                            {
                                "after_s": self.settings.settle_after_s,
                                "open_after_s": self.settings.settle_open_after_s,
                                "limit": limit,
                            },
                        ).fetchall()
                except psycopg.OperationalError as error:
                    raise self._unavailable(store, error) from None
            settled += len(found)
            orphans += sum(count for count, had_rows in found if not had_rows)
            if len(found) < limit:
                self.settled_at = time.monotonic()
                break
        if orphans:
            self.stats.problem(
                "orphan_spans",
                f"{orphans} spans dropped: no job span of their trace arrived in time",
            )
        return settled, orphans

    def close(self) -> None:
        while True:
            try:
                self._stores.get_nowait().close()
            except queue.Empty:
                return
