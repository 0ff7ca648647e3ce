"""The receiver's database side: a request's spans are staged and their jobs' rows derived, in
one transaction (`request`), before the request is answered.

Rows are a function of a job's spans (docs/ingest.md). An attempt is settled on its own once it
has its final row, no span of it is open and its job had no span for ``settle_after_s`` (or for
``settle_open_after_s`` whatever it waits for): its spans lose their bodies, and a later copy
or child of them is a late copy (counted, dropped). Spans placed in no job for
``settle_open_after_s`` are dropped (counted).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from .._core.facts import LogFacts, SpanFacts
from .._pg.store import StepStore
from .._telemetry.metrics import Committed
from .._telemetry.stats import Stats
from ..errors import ConfigurationError, SchemaNotMigratedError, describe
from ..schema import check_writable_tables
from ..sql import qualified_queries, rendered_queries
from .counting import counted as counted_of
from .failures import REPEATS_REFUSED, Fault, Repeats, fault
from .ids import signed
from .pool import StorePool
from .receipt import Receipt, Transaction
from .request import receive
from .rows import LogRow, SpanRow
from .session import Session
from .settings import CollectSettings

__all__ = ["Receipt", "RequestFailed", "Staging", "StagingUnavailable"]

_RETRIED = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
_TRANSACTION_ATTEMPTS = 5
_MAX_TRIES = 64  # transactions a request whose statements fail may take to find what fails
_WHAT = "spans (log records) refused: a statement failed for them every time,"
_MAX_UNCERTAIN = 1000  # lost COMMITs' changes kept until txid_status tells (memory bound)


class StagingUnavailable(Exception):
    """The database cannot take the spans now (answered 503: the client retries later)."""


class RequestFailed(StagingUnavailable):
    """This request's statements failed and another try may pass (a lock or statement
    timeout): answered 503 as well, while collect goes on with the other requests."""


class _Tries:
    """The transactions one request may still take: the halves `_isolated` makes share it."""

    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


class _Failed(Exception):
    def __init__(self, error: psycopg.Error, fault: Fault) -> None:
        self.error = error
        self.fault = fault


def _keys(rows: list[SpanRow], logs: list[LogRow]) -> list[tuple[str, int, int | bytes]]:
    """What tells a request's spans (records) apart: (trace, span id, phase or record key)."""
    return [row[:3] for row in rows] + [log[:3] for log in logs]


def _total(first: Receipt, second: Receipt) -> Receipt:
    """The receipt of a request staged in two parts."""
    return Receipt(
        first.staged + second.staged,
        first.duplicates + second.duplicates,
        first.late + second.late,
        first.rejected + second.rejected,
        first.waiting + second.waiting,
        first.reason or second.reason,
    )


class Staging:
    """Stages received spans and derives rows; one per receiver process, thread-safe, with
    ``settings.connections`` pooled connections serving requests in parallel."""

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
        self._uncertain: list[Transaction] = []
        self._uncertain_lock = threading.Lock()
        self.stats = stats or Stats()
        self._repeats = Repeats()  # spans whose requests met contention, and how often
        self._pool = StorePool(settings)

    def resting(self) -> bool:
        """Whether the database failed a moment ago: requests are refused without trying."""
        return time.monotonic() < self._down_until

    def receive(self, spans: Sequence[SpanFacts], wire: Sequence[bytes]) -> Receipt:
        """Stage ``spans`` (``wire``: each as received) and derive their jobs' rows; durable
        when this returns. `StagingUnavailable` when the database cannot take them now."""
        if not spans:
            return Receipt(0, 0, 0)
        if self.resting():
            raise StagingUnavailable("the database was unreachable a moment ago")
        rows: list[SpanRow] = sorted(
            (
                SpanRow(
                    format(s.trace_id, "032x"), signed(s.span_id), 1 if s.end_ns else 0, s, body
                )
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
        logs: list[LogRow] = sorted(
            (
                LogRow(format(r.trace_id, "032x"), signed(r.span_id), key, seq, r, body)
                for seq, (r, body, key) in enumerate(zip(records, wire, keys, strict=True))
            ),
            key=lambda row: row[:3],
        )
        receipt = self._transact([], logs)
        self.stats.add("logs_staged", receipt.staged)
        self.stats.add("logs_duplicate", receipt.duplicates)
        self.stats.add("logs_waiting", receipt.waiting)
        return receipt

    def _transact(self, rows: list[SpanRow], logs: list[LogRow]) -> Receipt:
        """`request.receive` in a transaction (`_isolated`); `StagingUnavailable` when the
        database cannot take anything now, `RequestFailed` when this request's statements
        failed and another try may pass."""
        try:
            with self._pool.store() as store:
                self._count_uncertain(store)
                return self._isolated(store, rows, logs, _Tries(_MAX_TRIES))
        except _Failed as failed:  # this request only: no pause, the others go on
            self.stats.add("statement_retry_answers")
            # A right revoked, a table altered: logged, and the exporter keeps the spans.
            kind = "database_error" if failed.fault is Fault.OTHER else "statement_contention"
            self.stats.problem(kind, failed.error)
            raise RequestFailed(describe(failed.error)) from None
        except psycopg.Error as error:  # away (PoolTimeout too: no connection came)
            raise self._unavailable(error) from None

    def _isolated(
        self, store: StepStore, rows: list[SpanRow], logs: list[LogRow], tries: _Tries
    ) -> Receipt:
        """`_try`, and where a statement fails for what this request holds (`failures`), the
        request in halves, down to the spans (records) that still fail, which are refused and
        counted; at most ``tries.left`` transactions in all (the rest of a part that fails then is
        refused). `_Failed` when the request is to be answered retryable."""
        tries.left -= 1
        try:
            receipt = self._try(store, rows, logs)
        except psycopg.Error as error:
            kind = fault(error)
            if kind is Fault.AWAY:
                raise
            keys = _keys(rows, logs)
            if kind is Fault.OTHER or (
                kind is Fault.CONTENTION and self._repeats.failed(keys) < REPEATS_REFUSED
            ):
                raise _Failed(error, kind) from None
            if len(keys) > 1 and tries.left > 1:  # a request holds spans, or records
                half_rows, half_logs = (len(rows) + 1) // 2, (len(logs) + 1) // 2
                return _total(
                    self._isolated(store, rows[:half_rows], logs[:half_logs], tries),
                    self._isolated(store, rows[half_rows:], logs[half_logs:], tries),
                )
            self._repeats.forget(keys)
            self.stats.add("statement_refusals")
            self.stats.problem("statement_refused", error)
            why = f"PostgreSQL refused them ({error.sqlstate or type(error).__name__})"
            return Receipt(0, 0, 0, rejected=len(keys), reason=f"{len(keys)} {_WHAT} {why}")
        if self._repeats:  # some spans met contention before: these may be among them
            self._repeats.forget(_keys(rows, logs))
        return receipt

    def _try(self, store: StepStore, rows: list[SpanRow], logs: list[LogRow]) -> Receipt:
        """One request's transaction, again where PostgreSQL ended it as a deadlock's victim
        (at most `_TRANSACTION_ATTEMPTS` times); a lost COMMIT's changes kept to count."""
        for attempt in range(_TRANSACTION_ATTEMPTS):
            transaction = Transaction()
            try:
                receipt, committed = self._once(store, rows, logs, transaction)
            except _RETRIED:
                if attempt + 1 == _TRANSACTION_ATTEMPTS:
                    raise
            except psycopg.Error as error:
                if transaction.committed is not None and fault(error) is Fault.AWAY:
                    self._note_uncertain(transaction)  # the COMMIT may have landed
                raise
            else:
                self._on_committed(committed)
                return receipt
        raise AssertionError("unreachable")

    def _once(
        self, store: StepStore, rows: list[SpanRow], logs: list[LogRow], transaction: Transaction
    ) -> tuple[Receipt, Committed]:
        conn = store.connection()
        with conn.transaction(), conn.cursor() as cur:
            queries = rendered_queries("ingest.sql", self.settings.schema, conn)
            session = Session(cur, store, queries, self.settings, self.stats)
            return receive(session, rows, logs, transaction)

    def _note_uncertain(self, transaction: Transaction) -> None:
        """Keep a transaction whose COMMIT went unanswered, the newest `_MAX_UNCERTAIN`."""
        with self._uncertain_lock:
            self._uncertain.append(transaction)
            over = len(self._uncertain) - _MAX_UNCERTAIN
            if over > 0:
                del self._uncertain[:over]
        if over > 0:
            self.stats.problem("metrics_uncounted", "a lost COMMIT's rows left out of the metrics")

    def _count_uncertain(self, store: StepStore) -> None:
        """Count each transaction whose COMMIT went unanswered once the server says it
        committed (its retry is all duplicates); forget it if not; else ask again later."""
        with self._uncertain_lock:
            uncertain, self._uncertain = self._uncertain, []
        kept = []
        for index, transaction in enumerate(uncertain):
            if transaction.txid is None or transaction.committed is None:
                continue
            try:
                status = store.transaction_status(transaction.txid)
            except psycopg.Error:
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
        """`StagingUnavailable` unless a connection is at hand or opens now: checked before a
        body is decoded, so a database that is away costs no decoding memory."""
        try:
            with self._pool.store():
                pass
        except psycopg.OperationalError as error:
            raise self._unavailable(error) from None

    def _unavailable(self, error: BaseException) -> StagingUnavailable:
        # Answer at once for a moment instead of every request waiting to connect.
        self.stats.add("database_pauses")
        self._down_until = time.monotonic() + self._pause_s
        return StagingUnavailable(describe(error))

    def check(self) -> None:
        """At startup: the tables must be migrated (`SchemaNotMigratedError`). An unreachable
        database is only logged: the receiver answers 503 until it is back."""
        try:
            with self._pool.store() as store:
                missing = self._check(store.connection())
        except psycopg.OperationalError as error:
            self.stats.problem("database_unavailable", describe(error))
            return
        if missing:
            raise ConfigurationError(
                "collect needs SELECT, INSERT, UPDATE and DELETE on its tables; this role"
                f" lacks {', '.join(f'{right} on {table}' for table, right in missing)}"
            )

    def _check(self, conn: psycopg.Connection[Any]) -> list[tuple[str, str]]:
        """The rights this role lacks; `SchemaNotMigratedError` without the tables."""
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
        return [(str(table), str(right)) for table, right in missing]

    def settle(self, *, limit: int = 1000) -> tuple[int, int]:
        """Settle every attempt due and drop the spans that found no job in time, ``limit`` per
        transaction (so the pass keeps up with any rate); returns (attempts, orphans dropped)."""
        params = {
            "after_s": self.settings.settle_after_s,
            "open_after_s": self.settings.settle_open_after_s,
            "limit": limit,
        }
        try:
            with self._pool.store() as store:  # a lost COMMIT's answer, even with no request
                self._count_uncertain(store)
            found = {name: self._settle_rounds(name, params, limit) for name in _SETTLE_STEPS}
        except psycopg.Error as error:
            if fault(error) is not Fault.AWAY:  # a statement timeout: the next pass tries again
                raise
            raise self._unavailable(error) from None
        self.settled_at = time.monotonic()
        settled = found["settle_attempts"][0]
        orphans, orphan_logs = found["drop_orphans"][1], found["drop_orphan_logs"][1]
        if orphans:
            self.stats.problem(
                "orphan_spans", f"{orphans} spans dropped: no job span of theirs arrived in time"
            )
        if orphan_logs:
            self.stats.add("logs_orphaned", orphan_logs)
            self.stats.problem(
                "orphan_logs", f"{orphan_logs} log records dropped: their span found no job in time"
            )
        return settled, orphans

    def _settle_rounds(self, name: str, params: dict[str, float], limit: int) -> tuple[int, int]:
        """One settle statement in transactions of ``limit`` until less is left: (rounds'
        sums of attempts, of spans)."""
        rounds_total = spans_total = 0
        while True:
            counted = Committed()
            with self._pool.store() as store:
                conn = store.connection()
                with conn.transaction():
                    found = conn.execute(self._queries[name], params).fetchone()
                    rounds, spans, *pending = found or (0, 0)
                    if pending and pending[0]:  # attempts settled while pending
                        columns = {"domain": pending[0], "job_id": pending[1]}
                        columns["attempt"] = pending[2]
                        rows = conn.execute(self._queries["counted_rows"], columns)
                        counted = counted_of(rows.fetchall())
            if counted.steps or counted.attempts:
                self._on_committed(counted)
            rounds_total += rounds
            spans_total += spans
            if rounds < limit:
                return rounds_total, spans_total

    def close(self) -> None:
        self._pool.close()


_SETTLE_STEPS = ("settle_attempts", "drop_orphans", "drop_orphan_logs")
