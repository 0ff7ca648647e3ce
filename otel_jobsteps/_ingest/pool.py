"""The receiver's database connections: a `psycopg_pool.ConnectionPool` of connections set up
as the writer's (bounded waits, statement timeout), each lent to a request as a `StepStore`."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from .._pg.db import connection_kwargs
from .._pg.store import StepStore, _BoundedConnection
from .settings import CollectSettings

__all__ = ["PooledStore", "StorePool"]

_STATEMENT_TIMEOUT_MS = 30_000  # as the writer's StepStore
_UNREACHABLE_WAIT_S = 0.5  # the wait for a connection while none has come: an outage answers fast


class PooledStore(StepStore):
    """A `StepStore` writing through the connection a request borrowed; its rows are marked
    as collect's derivation."""

    def __init__(self, conn: psycopg.Connection[Any], schema: str) -> None:
        super().__init__("", schema=schema, derived=True)
        self._borrowed = conn

    def connection(self) -> psycopg.Connection[Any]:
        return self._borrowed

    def close(self) -> None:
        """The pool owns the connection: a broken one is replaced when it is returned."""


class _Pool(ConnectionPool[Any]):
    """psycopg_pool's pool with its connections' jitter drawn from a generator of its own: the
    global one is the application's (a property test's draws must not change under it)."""

    _random = random.Random()

    @classmethod
    def _jitter(cls, value: float, min_pc: float, max_pc: float) -> float:
        return value * (1.0 + (max_pc - min_pc) * cls._random.random() + min_pc)


class StorePool:
    """``settings.connections`` connections, opened in the background and reopened when they
    break; a request waits ``connect_timeout_s`` at most for one."""

    def __init__(self, settings: CollectSettings) -> None:
        self._schema = settings.schema
        self._timeout_s = settings.connect_timeout_s
        self._unreachable = True  # until a connection came: a request then waits briefly
        reply_timeout_s = _STATEMENT_TIMEOUT_MS / 1000.0 + settings.connect_timeout_s
        kwargs = connection_kwargs(
            connect_timeout_s=settings.connect_timeout_s, tcp_user_timeout_s=reply_timeout_s
        )
        self._pool: ConnectionPool[Any] = _Pool(
            settings.dsn,
            min_size=settings.connections,
            max_size=settings.connections,
            kwargs={"autocommit": True, **kwargs},
            connection_class=_BoundedConnection,
            configure=lambda conn: _configure(conn, reply_timeout_s),
            timeout=settings.connect_timeout_s,
            name="collect",
            open=True,
        )

    @contextmanager
    def store(self) -> Iterator[StepStore]:
        """A store over a borrowed connection (`psycopg_pool.PoolTimeout` when none comes).
        While the database is unreachable a request waits briefly, so an outage answers 503 fast."""
        timeout = self._timeout_s
        if self._unreachable:
            timeout = min(timeout, _UNREACHABLE_WAIT_S)
        with ExitStack() as stack:
            try:
                conn = stack.enter_context(self._pool.connection(timeout=timeout))
            except PoolTimeout:
                self._unreachable = True
                raise
            self._unreachable = False
            yield PooledStore(conn, self._schema)

    def close(self) -> None:
        self._pool.close()


def _configure(conn: psycopg.Connection[Any], reply_timeout_s: float) -> None:
    """As the writer's connections: every wait for the server bounded, a statement timeout."""
    if isinstance(conn, _BoundedConnection):
        conn.reply_timeout_s = reply_timeout_s
    conn.execute("SELECT set_config('statement_timeout', %s, false)", (str(_STATEMENT_TIMEOUT_MS),))
