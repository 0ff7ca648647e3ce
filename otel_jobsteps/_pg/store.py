"""PostgreSQL access for the writer: one lazy connection, one transaction per batch.

Every operation kind of a segment becomes one set-based statement over parallel arrays; new
rows that no conflict could skip (no open step among them) are COPYed instead. If a
batch fails because PostgreSQL says a row can never be written (`rejects_row`: the SQLSTATE
table below), it is written again one operation at a time, each in a savepoint, so one bad row
never takes the good rows around it down. Any other failure leaves the whole batch for a retry.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import fields
from itertools import repeat
from operator import add, attrgetter
from typing import Any, TypeVar

import psycopg
from psycopg import pq
from psycopg.abc import PQGen

from .._core.batch import (
    Abandon,
    Batch,
    CloseForeign,
    CloseStep,
    EventRow,
    FailClosedStep,
    JobLogRow,
    Progress,
)
from .._core.detail import DEFAULT_MAX_DETAIL_BYTES, encode_detail
from .._core.times import EXACT_US
from .._core.vocabulary import ABANDONED, FAILED, STEP
from .._telemetry.metrics import ClosedStep, Committed, FinishedAttempt
from ..sql import Statement, rendered_queries
from .db import check_schema_name, connection_kwargs

__all__ = [
    "SQLSTATE_CLASSES",
    "StepStore",
    "copy_rows",
    "copyable",
    "detail_texts",
    "rejects_row",
    "statement_params",
    "statements",
]

# What a failed write means, by SQLSTATE class (the code's first two characters); the README's
# failure section shows this same table. "row": PostgreSQL says this row can never be written,
# so the batch is written again one operation at a time and only the rejected operations are
# dropped (counted as rejected_*). "retry": the whole batch waits and is written again with
# backoff, nothing dropped. A class not listed, and an error without a SQLSTATE (connection
# lost, no reply in time), is "retry".
SQLSTATE_CLASSES: dict[str, tuple[str, str]] = {
    "08": ("retry", "connection exception"),
    "21": ("row", "cardinality violation"),
    "22": ("row", "data exception: a value out of range, malformed text or JSON"),
    "23": ("row", "integrity constraint violation, e.g. a user's CHECK constraint"),
    "25": ("retry", "invalid transaction state: 25006 read-only transaction (after a failover)"),
    "40": ("retry", "transaction rollback: 40001 serialization failure, 40P01 deadlock"),
    "42": ("retry", "undefined table or column, no privilege: a migration or grant pending"),
    "53": ("retry", "insufficient resources: disk full, out of memory, too many connections"),
    "54": ("row", "program limit exceeded: a row too large for an index"),
    "55": ("retry", "object not in prerequisite state: 55P03 lock not available"),
    "57": ("retry", "operator intervention: 57014 statement timeout, 57P01-57P05 shutdown"),
    "58": ("retry", "system error: I/O error"),
    "P0": ("row", "raised by a trigger (PL/pgSQL RAISE EXCEPTION)"),
    "XX": ("retry", "internal error"),
}
RV = TypeVar("RV")

# Each statement and the segment list it reads, in write order: updates of open rows first
# (they never touch a row inserted in the same segment), then inserts, then the failing ends
# of rows a sibling closed (the row and its sibling may be inserted in the same segment).
# testing.InMemoryStore applies this order.
STATEMENTS: tuple[tuple[str, str], ...] = (
    ("abandon_earlier_attempts", "abandons"),
    ("close_foreign_steps", "foreign_closes"),
    ("write_progress", "progress"),
    ("close_steps", "closes"),
    ("insert_events", "rows"),
    ("fail_sibling_closed_steps", "sibling_failures"),
    ("insert_job_logs", "job_logs"),
)
# Connections inherited through fork: kept alive so they are never finalised in the child.
_forgotten: list[psycopg.Connection[Any]] = []
_SKIPPED_FIELDS = frozenset({"segment"})


def statements(batch: Batch) -> list[tuple[str, Sequence[Any]]]:
    """Each non-empty statement of each segment of ``batch``, in write order."""
    return [
        (name, ops)
        for segment in batch.segments
        for name, attr in STATEMENTS
        if (ops := getattr(segment, attr))
    ]


def rejects_row(error: BaseException) -> bool:
    """Whether ``error`` says a row can never be written (one-at-a-time path) rather than
    that the batch should be written again later (see `SQLSTATE_CLASSES`)."""
    sqlstate = getattr(error, "sqlstate", None)
    if sqlstate:
        return SQLSTATE_CLASSES.get(sqlstate[:2], ("retry", ""))[0] == "row"
    # Without a SQLSTATE: psycopg could not send a value of one row (a DataError, or text it
    # cannot encode: the same on every try), or the connection failed, or the error is not
    # PostgreSQL's at all (a bug of ours: retried, never taken for a bad row and dropped).
    return isinstance(error, (psycopg.DataError, psycopg.IntegrityError, UnicodeEncodeError))


class _NoReply(Exception):
    pass


def _within(gen: PQGen[RV], deadline: float) -> PQGen[RV]:
    """``gen``, given up once ``deadline`` passed with nothing received: psycopg (>= 3.2)
    resumes the generator at least every 0.1 s while it waits, ``Ready.NONE`` when silent."""
    try:
        state = next(gen)
        while True:
            ready = yield state
            if not ready and time.monotonic() > deadline:
                raise _NoReply
            state = gen.send(ready)
    except StopIteration as stop:
        result: RV = stop.value
        return result


class _BoundedConnection(psycopg.Connection[Any]):
    """A connection whose every wait for the server ends after ``reply_timeout_s``.

    A server that stops answering mid-statement (a partition, a frozen host, a proxy holding
    the reply) would otherwise hold the writer until TCP gives up; ``statement_timeout`` cannot
    help, the server never hears it.
    """

    reply_timeout_s: float = 60.0

    def wait(self, gen: PQGen[RV], *args: Any, **kwargs: Any) -> RV:
        deadline = time.monotonic() + self.reply_timeout_s
        try:
            return super().wait(_within(gen, deadline), *args, **kwargs)
        except _NoReply:
            self.pgconn.finish()  # stopped mid-protocol: never usable again
            raise psycopg.OperationalError(
                f"no reply from the server within {self.reply_timeout_s:g} s"
            ) from None


# Each statement's parameters: a getter per field of its operation kind, in field order.
_FIELD_GETTERS = {
    kind: tuple((f.name, attrgetter(f.name)) for f in fields(kind) if f.name not in _SKIPPED_FIELDS)
    for kind in (Abandon, CloseForeign, CloseStep, FailClosedStep, Progress, EventRow, JobLogRow)
}


_STRICT_JSON = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


# COPY's binary fields carry no type: each is its column type's binary form. The store sends a
# detail as jsonb's (a version byte, 1, then the JSON text: a str psycopg encodes as text's) and a
# time as timestamptz's (microseconds since 2000: an int8's form).
_COPY_TYPES = ("text",) * 3 + ("int4",) + ("text",) * 7 + ("text", "int8", "int8", "bool")
# The fields before the detail, in copy_events' column order; the detail and times follow.
_COPY_HEAD = attrgetter(
    "domain", "job_id", "job_type", "attempt", "type", "step_key", "step_status", "message",
    "trace_id", "span_id", "execution_id",
)  # fmt: skip
_CREATED, _ENDED = attrgetter("created_us"), attrgetter("ended_us")
_JSONB_VERSION = "\x01"
_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since 1970
# Separates the details in one JSON text: it encodes as "\u0000", which no detail encode_detail
# passes unchanged holds (a NUL makes it encode the detail again).
_SEPARATOR = "\x00"
_ENCODED_SEPARATOR = ',"\\u0000",'


def copyable(rows: Sequence[EventRow]) -> bool:
    """Whether no row is an open step: none of them could meet insert_events' ON CONFLICT, so
    they may be COPYed (copy_events)."""
    return all(row.type != STEP or row.ended_us is not None for row in rows)


def detail_texts(
    details: Sequence[Any], max_detail_bytes: int, prefix: str = ""
) -> list[str | None]:
    """`encode_detail` of each detail (None stays None), each after ``prefix``.

    One C call encodes them all, separated by a NUL string; the text is cut at the separators
    when each of them is there once and nothing else needs encode_detail's care (a NUL, a
    surrogate, a value JSON has no word for); else, and for a detail over ``max_detail_bytes``,
    detail by detail."""
    count = len(details)
    spaced: list[Any] = [_SEPARATOR] * (2 * count - 1)
    spaced[::2] = details
    try:
        text = _STRICT_JSON.encode(spaced)
    except (TypeError, ValueError, RecursionError):
        text = ""
    if not text or text.count("\\u0000") != count - 1 or "\\ud" in text:
        return [_prefixed(encode_detail(d, max_detail_bytes), prefix) for d in details]
    texts = (prefix + text[1:-1]).replace(_ENCODED_SEPARATOR, "\x00" + prefix).split("\x00")
    null, longest = prefix + "null", max_detail_bytes + len(prefix)
    return [
        t
        if len(t) <= longest and t != null
        else _prefixed(encode_detail(d, max_detail_bytes), prefix)
        for t, d in zip(texts, details, strict=True)
    ]


def _prefixed(text: str | None, prefix: str) -> str | None:
    return None if text is None else prefix + text


def _pg_times(times: Iterator[int | None]) -> list[int | None]:
    """Times as timestamptz's microseconds since 2000, rounded as the statements' float8
    arithmetic (``timestamptz 'epoch' + us * interval '1 microsecond'``) rounds them."""
    return [
        None if us is None else (us if us <= EXACT_US else int(float(us))) - _PG_EPOCH_US
        for us in times
    ]


def copy_rows(
    rows: Sequence[EventRow], max_detail_bytes: int, derived: bool | None
) -> Iterator[tuple[Any, ...]]:
    """copy_events' records of ``rows``, in its column order and `_COPY_TYPES`."""
    details = detail_texts([row.detail for row in rows], max_detail_bytes, _JSONB_VERSION)
    created = _pg_times(map(_CREATED, rows))
    ended = _pg_times(map(_ENDED, rows))
    return map(add, map(_COPY_HEAD, rows), zip(details, created, ended, repeat(derived)))


def statement_params(
    ops: Sequence[Any], max_detail_bytes: int, *, derived: bool | None = None
) -> dict[str, Any]:
    """Statement parameters: one array per field, a detail as JSON text; ``derived`` marks the
    rows it inserts (True: collect's, see `StepStore`)."""
    params: dict[str, Any] = {"derived": derived}
    for name, getter in _FIELD_GETTERS[type(ops[0])]:
        values = list(map(getter, ops))
        params[name] = detail_texts(values, max_detail_bytes) if name == "detail" else values
    return params


def _note_changes(cur: psycopg.Cursor[Any], name: str, ops: Sequence[Any], into: Committed) -> None:
    """Add to ``into`` the steps the statement just run closed and the final rows it inserted."""
    # fail_sibling_closed_steps is not counted: its step was, as its row was first committed
    # (COMPLETED), and counters never go back (collect's recount keeps the first status too).
    if name in ("close_steps", "close_foreign_steps"):
        into.steps.extend(map(ClosedStep._make, cur.fetchall()))
    elif name == "insert_events":
        # A closed row is never skipped: the conflict is on open steps only.
        into.step_rows += [r for r in ops if r.ended_us is not None and r.type == STEP]
    elif name == "insert_job_logs":
        if cur.rowcount < len(ops):  # some attempt had its final row already: those are not new
            inserted = {tuple(row) for row in cur.fetchall()}
            ops = [r for r in ops if (r.domain, r.job_id, r.attempt) in inserted]
            ops = list({(r.domain, r.job_id, r.attempt): r for r in reversed(ops)}.values())
        into.log_rows += ops
    elif name == "abandon_earlier_attempts":
        for trace_id, span_id, domain, job_id, job_type, key, attempt, seconds in cur.fetchall():
            if attempt is None:
                into.steps.append(
                    ClosedStep(trace_id, span_id, domain, job_type, key, FAILED, seconds)
                )
            else:
                into.attempts.append(
                    FinishedAttempt(domain, job_id, attempt, job_type, FAILED, ABANDONED)
                )


class StepStore:
    """Writes batches to the ``job_event`` and ``job_log`` tables of one schema."""

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = "public",
        connect_timeout_s: float = 5.0,
        statement_timeout_ms: int = 30_000,
        max_detail_bytes: int = DEFAULT_MAX_DETAIL_BYTES,
        on_connect: Callable[[psycopg.Connection[Any]], None] | None = None,
        reply_timeout_s: float | None = None,
        derived: bool = False,
    ) -> None:
        """``derived``: the rows it inserts are collect's derivation (it may delete and write
        them again); the processor's stay unmarked."""
        check_schema_name(schema)
        self._conninfo = conninfo
        self._connect_timeout_s = connect_timeout_s
        self._statement_timeout_ms = statement_timeout_ms
        # The server answers within its statement timeout (a cancelled statement replies at
        # once); a connect timeout on top covers the network. Longer silence: it is gone.
        self.reply_timeout_s = (
            reply_timeout_s
            if reply_timeout_s is not None
            else statement_timeout_ms / 1000.0 + connect_timeout_s
        )
        self._max_detail_bytes = max_detail_bytes
        self._derived = True if derived else None
        self._schema = schema
        self._on_connect = on_connect
        self._conn: psycopg.Connection[Any] | None = None
        self.last_transaction: int | None = None
        # What the last transaction's statements changed, kept should its COMMIT go unanswered.
        self.last_changes: Committed | None = None

    def connection(self) -> psycopg.Connection[Any]:
        """The open connection, connecting first if there is none or it broke."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            self.close()
            conn = _BoundedConnection.connect(
                self._conninfo,
                autocommit=True,
                **connection_kwargs(
                    connect_timeout_s=self._connect_timeout_s,
                    tcp_user_timeout_s=self.reply_timeout_s,
                ),
            )
            conn.reply_timeout_s = self.reply_timeout_s
            conn.execute(
                "SELECT set_config('statement_timeout', %s, false)",
                (str(self._statement_timeout_ms),),
            )
            if self._on_connect is not None:
                try:
                    self._on_connect(conn)
                except BaseException:
                    conn.close()
                    raise
            self._conn = conn
        return conn

    def forget_after_fork(self) -> None:
        """In a forked child: drop the parent's connection without a word on its socket.

        Closing it here would send the server a terminate message and end the parent's
        session, so the child's copy of the socket is pointed at /dev/null first.
        """
        conn, self._conn = self._conn, None
        if conn is None or conn.closed:
            return
        try:
            devnull = os.open(os.devnull, os.O_RDWR)
            try:
                os.dup2(devnull, conn.fileno())
            finally:
                os.close(devnull)
        except OSError:
            pass
        _forgotten.append(conn)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with suppress(Exception):  # a broken socket must not stop the writer
                conn.close()

    def write(self, batch: Batch) -> Committed:
        """Write the batch in one transaction (raises on any failure; nothing is then written);
        returns what it closed and finished."""
        committed = self.last_changes = Committed()
        with self._transaction() as cur:
            queries = self._statements(cur.connection)
            for name, ops in statements(batch):
                self._execute(cur, queries, name, ops)
                _note_changes(cur, name, ops, committed)
                if name == "insert_events" and cur.rowcount < len(ops):
                    self._take_over_open_steps(cur, ops, committed)
        return committed

    def _execute(
        self, cur: psycopg.Cursor[Any], queries: Mapping[str, Statement], name: str, ops: Any
    ) -> None:
        """Run statement ``name`` for ``ops``; new rows no conflict could skip are COPYed."""
        if name == "insert_events" and copyable(ops):
            with cur.copy(queries["copy_events"]) as copy:
                copy.set_types(_COPY_TYPES)
                for record in copy_rows(ops, self._max_detail_bytes, self._derived):
                    copy.write_row(record)
        else:
            cur.execute(queries[name], self._params(ops))

    def _take_over_open_steps(
        self, cur: psycopg.Cursor[Any], rows: Sequence[EventRow], committed: Committed
    ) -> None:
        """Another execution opened a step of the same attempt while this batch ran.

        In command order our step started after theirs, so theirs is closed as abandoned
        and ours inserted again; rows already in place conflict with themselves and stay.
        """
        running = [row for row in rows if row.ended_us is None and row.type == "STEP"]
        if not running:
            return
        takeovers = [
            CloseForeign(r.domain, r.job_id, r.attempt, r.execution_id or "", r.created_us)
            for r in running
        ]
        queries = self._statements(cur.connection)
        cur.execute(queries["close_foreign_steps"], statement_params(takeovers, 0))
        _note_changes(cur, "close_foreign_steps", takeovers, committed)
        cur.execute(queries["insert_events"], self._params(running))

    def write_one_by_one(
        self, batch: Batch, on_rejected: Callable[[str, BaseException], None]
    ) -> Committed:
        """Write each operation in its own savepoint; report and skip those PostgreSQL rejects."""
        committed = self.last_changes = Committed()
        with self._transaction() as cur:
            queries = self._statements(cur.connection)
            for name, ops in statements(batch):
                for op in ops:
                    changed = Committed()
                    try:
                        with cur.connection.transaction():
                            self._execute(cur, queries, name, [op])
                            _note_changes(cur, name, [op], changed)
                    except (psycopg.Error, UnicodeEncodeError) as error:
                        if not rejects_row(error):
                            raise
                        on_rejected(name, error)
                    else:
                        committed.extend(changed)
        return committed

    def _params(self, ops: Sequence[Any]) -> dict[str, Any]:
        return statement_params(ops, self._max_detail_bytes, derived=self._derived)

    def _statements(self, conn: psycopg.Connection[Any]) -> Mapping[str, Statement]:
        return rendered_queries("queries.sql", self._schema, conn)

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor in one transaction whose id is noted first, to ask its fate if the
        connection breaks before the COMMIT's answer arrives."""
        self.last_transaction = None  # set once this batch's transaction has an id
        conn = self.connection()
        # A savepoint in a transaction its owner began (collect's request): the owner has its id.
        nested = conn.info.transaction_status != pq.TransactionStatus.IDLE
        with conn.transaction(), conn.cursor() as cur:
            if not nested:
                row = cur.execute("SELECT txid_current()").fetchone()
                self.last_transaction = row[0] if row else None
            yield cur

    def transaction_status(self, transaction: int) -> str | None:
        """``committed``, ``aborted``, ``in progress``, or None when too old to tell."""
        try:
            row = self.connection().execute("SELECT txid_status(%s)", (transaction,)).fetchone()
        except psycopg.errors.InvalidParameterValue:
            # "In the future": the server came back from a crash (or a failover) without this
            # transaction in its WAL; whatever it wrote is not there, so it is written again.
            return "aborted"
        return row[0] if row else None

    def refresh_heartbeats(self, open_steps: Sequence[tuple[str, str, int, str]]) -> None:
        """Mark these open steps alive (``sweep`` closes steps whose heartbeat went silent)."""
        domains, job_ids, attempts, executions = (
            list(column) for column in zip(*open_steps, strict=True)
        )
        conn = self.connection()
        conn.execute(
            self._statements(conn)["refresh_heartbeats"],
            {"domain": domains, "job_id": job_ids, "attempt": attempts, "execution_id": executions},
        )
