"""Database helpers every part shares: connections, redaction, names, reads into dataclasses."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import fields
from datetime import datetime, timedelta
from functools import cache
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import class_row

from ..errors import ConfigurationError, DatabaseUnavailableError, SchemaNotMigratedError, describe
from .times import read_any_time

__all__ = [
    "Record",
    "Target",
    "borrowed_connection",
    "check_dsn",
    "check_schema_name",
    "connection_kwargs",
    "fetch",
    "redact",
    "session",
]

Target = str | psycopg.Connection[Any]
"""A connection string (a connection is opened and closed) or the caller's open connection."""
_R = TypeVar("_R")


def check_dsn(dsn: str) -> str:
    """``dsn`` if libpq can parse it; else a ConfigurationError that does not echo it."""
    try:
        conninfo_to_dict(dsn)
    except (psycopg.Error, UnicodeError):  # its message could echo the password
        raise ConfigurationError("the DSN is not a valid PostgreSQL connection string") from None
    return dsn


def check_schema_name(schema: str) -> str:
    """``schema`` if it can name a schema (it is always quoted as an identifier, never spliced)."""
    try:
        size = len(schema.encode())
    except UnicodeEncodeError:  # lone surrogates: the undecodable bytes of an argument
        size = 0
    if not 0 < size <= 63 or "\x00" in schema:
        raise ConfigurationError(
            "schema must be a non-empty UTF-8 name of at most 63 bytes without NUL"
        )
    return schema


# Parameters holding a secret: those libpq marks as such, and the SCRAM keys of libpq 18,
# which it lists among its debug options though they authenticate like a password.
_SECRET_PARAMETERS = frozenset(
    {"password", "sslpassword", "oauth_client_secret", "scram_client_key", "scram_server_key"}
)


@cache
def _secret_parameters() -> frozenset[str]:
    """Ours and every parameter the linked libpq would mask in a dialog (``dispchar`` ``*``)."""
    masked = {o.keyword.decode() for o in psycopg.pq.Conninfo.get_defaults() if o.dispchar == b"*"}
    return _SECRET_PARAMETERS | masked


def redact(conninfo: str) -> str:
    """The connection string (URL or key=value) as key=value with every secret masked, for
    messages and logs."""
    try:
        params = conninfo_to_dict(conninfo)
    except (psycopg.ProgrammingError, UnicodeError):
        return "<unparsable connection string>"
    secret = _secret_parameters()
    shown = {k: "***" if k in secret else str(v) for k, v in params.items() if v is not None}
    return make_conninfo("", **shown)


def connection_kwargs(
    *, connect_timeout_s: float, tcp_user_timeout_s: float = 30.0
) -> dict[str, Any]:
    """Settings of every connection of ours: a bounded connect, a visible name, and TCP timeouts
    that notice a silent peer in seconds, not after the kernel's 15 minutes of retransmissions."""
    return {
        "connect_timeout": max(1, round(connect_timeout_s)),
        "application_name": "otel_jobsteps",
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "tcp_user_timeout": max(1, round(tcp_user_timeout_s * 1000)),
    }


@contextmanager
def borrowed_connection(
    target: Target, *, connect_timeout_s: float = 5.0
) -> Iterator[psycopg.Connection[Any]]:
    """Use the caller's connection as is, or open (and later close) one from a conninfo (it
    reads a time Python cannot hold as the nearest bound, `times.read_any_time`)."""
    if isinstance(target, psycopg.Connection):
        yield target
        return
    try:
        conn = psycopg.connect(
            target, autocommit=True, **connection_kwargs(connect_timeout_s=connect_timeout_s)
        )
    except psycopg.OperationalError as error:
        raise DatabaseUnavailableError(
            f"cannot connect to {redact(target)}: {describe(error)}"
        ) from None
    read_any_time(conn)  # a far-off time in one row must not fail the whole read
    with conn:
        yield conn


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_jsonable(item) for item in value]
    return value


class Record:
    """Base of the result dataclasses: ``to_dict()`` for JSON output."""

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict: ISO 8601 timestamps, durations in seconds."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


def _schema_error(schema: str) -> SchemaNotMigratedError:
    return SchemaNotMigratedError(
        f"schema {schema!r} lacks the otel_jobsteps tables or views: run `otel-jobsteps migrate`"
    )


@contextmanager
def session(
    target: Target, *, schema: str, snapshot: bool = False
) -> Iterator[psycopg.Connection[Any]]:
    """A connection in a transaction (a savepoint in the caller's); ``snapshot``: REPEATABLE READ,
    so several queries see one state. Errors become the package's exceptions."""
    check_schema_name(schema)
    with borrowed_connection(target) as conn:
        try:
            fresh = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            with conn.transaction():
                if snapshot and fresh:
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                yield conn
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            raise _schema_error(schema) from None
        except psycopg.OperationalError as error:
            raise DatabaseUnavailableError(f"database error: {describe(error)}") from None


def fetch(
    conn: psycopg.Connection[Any],
    query: sql.Composed,
    params: Mapping[str, Any],
    record: type[_R],
    *,
    prepare: bool | None = None,
) -> list[_R]:
    """Run a read query whose columns are the fields of ``record``; one instance per row.
    ``prepare=False`` plans it for its values every time."""
    with conn.cursor(row_factory=class_row(record)) as cur:
        read_any_time(cur)  # a caller's connection too
        return cur.execute(query, params, prepare=prepare).fetchall()
