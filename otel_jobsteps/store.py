"""PostgreSQL access for the writer: one lazy connection, one transaction per batch.

Every operation kind of a segment becomes one set-based statement over parallel arrays. If a
batch fails for a reason other than the connection, it is written again one operation at a
time, each in a savepoint, so one bad row never takes the good rows around it down.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import fields
from operator import attrgetter
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .batch import Abandon, Batch, CloseForeign, CloseStep, EventRow, JobLogRow, Progress, Segment
from .detail import DEFAULT_MAX_DETAIL_BYTES, encode_detail
from .errors import ConfigurationError, DatabaseUnavailableError
from .sql import qualified_queries

__all__ = [
    "StepStore",
    "borrowed_connection",
    "connection_kwargs",
    "redact",
]

# Statement kind, the segment list it reads, and the operation fields it sends, in write order:
# updates first (they never touch a row inserted in the same segment), then inserts.
_STATEMENTS: tuple[tuple[str, str], ...] = (
    ("abandon_earlier_attempts", "abandons"),
    ("close_foreign_steps", "foreign_closes"),
    ("write_progress", "progress"),
    ("close_steps", "closes"),
    ("insert_events", "rows"),
    ("insert_job_logs", "job_logs"),
)
# Connections inherited through fork: kept alive so they are never finalised in the child.
_forgotten: list[psycopg.Connection[Any]] = []
_DETAIL_FIELDS = frozenset({"detail"})
_SKIPPED_FIELDS = frozenset({"segment"})


def redact(conninfo: str) -> str:
    """The connection string with its password masked, for messages and logs."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "<unparsable connection string>"
    if "password" in params:
        params["password"] = "***"
    return make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None})


def connection_kwargs(*, connect_timeout_s: float) -> dict[str, Any]:
    """Settings every connection of ours uses: bounded connect, keepalives, a visible name."""
    return {
        "connect_timeout": max(1, round(connect_timeout_s)),
        "application_name": "otel_jobsteps",
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
    }


_FIELD_NAMES = {
    kind: tuple(f.name for f in fields(kind) if f.name not in _SKIPPED_FIELDS)
    for kind in (Abandon, CloseForeign, CloseStep, Progress, EventRow, JobLogRow)
}


def _row_getter(names: tuple[str, ...]) -> tuple[attrgetter[Any], attrgetter[Any]]:
    """Getters for the fields before and after ``detail``, in field order."""
    at = names.index("detail")
    return attrgetter(*names[:at]), attrgetter(*names[at + 1 :])


_ROW_GETTERS = {kind: _row_getter(_FIELD_NAMES[kind]) for kind in (EventRow, JobLogRow)}


def _params(ops: Sequence[Any], max_detail_bytes: int) -> dict[str, Any]:
    """Statement parameters: new rows as one JSON array of arrays, updates as column arrays."""
    kind = type(ops[0])
    if kind in _ROW_GETTERS:
        before, after = _ROW_GETTERS[kind]
        rows = [(*before(op), encode_detail(op.detail, max_detail_bytes), *after(op)) for op in ops]
        return {"rows": json.dumps(rows)}
    params: dict[str, Any] = {}
    for name in _FIELD_NAMES[kind]:
        values = [getattr(op, name) for op in ops]
        if name in _DETAIL_FIELDS:
            values = [encode_detail(v, max_detail_bytes) for v in values]
        params[name] = values
    return params


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
    ) -> None:
        if not schema:
            raise ConfigurationError("schema must be a non-empty name")
        self._conninfo = conninfo
        self._connect_timeout_s = connect_timeout_s
        self._statement_timeout_ms = statement_timeout_ms
        self._max_detail_bytes = max_detail_bytes
        self._queries = qualified_queries("queries.sql", schema)
        self._on_connect = on_connect
        self._conn: psycopg.Connection[Any] | None = None
        self.last_transaction: int | None = None

    @property
    def dsn_for_display(self) -> str:
        return redact(self._conninfo)

    def connection(self) -> psycopg.Connection[Any]:
        """The open connection, connecting first if there is none or it broke."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            self.close()
            conn = psycopg.connect(
                self._conninfo,
                autocommit=True,
                **connection_kwargs(connect_timeout_s=self._connect_timeout_s),
            )
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

    def is_connection_problem(self, error: BaseException) -> bool:
        """Whether ``error`` means the connection is gone (retry later) rather than bad data."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            return True
        return isinstance(error, psycopg.OperationalError) and not isinstance(
            error, psycopg.errors.QueryCanceled
        )

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with suppress(Exception):  # a broken socket must not stop the writer
                conn.close()

    def write(self, batch: Batch) -> None:
        """Write the batch in one transaction (raises on any failure; nothing is then written)."""
        self.last_transaction = None  # set once this batch's transaction has an id
        conn = self.connection()
        with conn.transaction(), conn.cursor() as cur:
            self._note_transaction(cur)
            for segment in batch.segments:
                for name, ops in self._statements(segment):
                    cur.execute(self._queries[name], _params(ops, self._max_detail_bytes))
                    if name == "insert_events" and cur.rowcount < len(ops):
                        self._take_over_open_steps(cur, ops)

    def _take_over_open_steps(self, cur: psycopg.Cursor[Any], rows: Sequence[EventRow]) -> None:
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
        cur.execute(self._queries["close_foreign_steps"], _params(takeovers, 0))
        cur.execute(self._queries["insert_events"], _params(running, self._max_detail_bytes))

    def write_one_by_one(
        self, batch: Batch, on_rejected: Callable[[str, BaseException], None]
    ) -> None:
        """Write each operation in its own savepoint; report and skip those PostgreSQL rejects."""
        self.last_transaction = None  # set once this batch's transaction has an id
        conn = self.connection()
        with conn.transaction(), conn.cursor() as cur:
            self._note_transaction(cur)
            for segment in batch.segments:
                for name, ops in self._statements(segment):
                    for op in ops:
                        try:
                            with conn.transaction():
                                cur.execute(
                                    self._queries[name],
                                    _params([op], self._max_detail_bytes),
                                )
                        except psycopg.DatabaseError as error:
                            if self.is_connection_problem(error):
                                raise
                            on_rejected(name, error)

    def _note_transaction(self, cur: psycopg.Cursor[Any]) -> None:
        """Remember this batch's transaction id, to ask its fate if the connection breaks."""
        row = cur.execute("SELECT txid_current()").fetchone()
        self.last_transaction = row[0] if row else None

    def transaction_status(self, transaction: int) -> str | None:
        """``committed``, ``aborted``, ``in progress``, or None when too old to tell."""
        row = self.connection().execute("SELECT txid_status(%s)", (transaction,)).fetchone()
        return row[0] if row else None

    def refresh_heartbeats(self, open_steps: Sequence[tuple[str, str, int, str]]) -> None:
        """Mark these open steps alive (``sweep`` closes steps whose heartbeat went silent)."""
        domains, job_ids, attempts, executions = (
            list(column) for column in zip(*open_steps, strict=True)
        )
        self.connection().execute(
            self._queries["refresh_heartbeats"],
            {"domain": domains, "job_id": job_ids, "attempt": attempts, "execution_id": executions},
        )

    @staticmethod
    def _statements(segment: Segment) -> list[tuple[str, Sequence[Any]]]:
        return [(name, ops) for name, attr in _STATEMENTS if (ops := getattr(segment, attr))]


@contextmanager
def borrowed_connection(
    target: str | psycopg.Connection[Any], *, connect_timeout_s: float = 5.0
) -> Iterator[psycopg.Connection[Any]]:
    """Use the caller's connection as is, or open (and later close) one from a conninfo."""
    if isinstance(target, psycopg.Connection):
        yield target
        return
    try:
        conn = psycopg.connect(
            target, autocommit=True, **connection_kwargs(connect_timeout_s=connect_timeout_s)
        )
    except psycopg.OperationalError as error:
        reason = str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__
        raise DatabaseUnavailableError(f"cannot connect to {redact(target)}: {reason}") from None
    with conn:
        yield conn
