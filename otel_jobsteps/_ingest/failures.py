"""What a failed statement of a request means for collect, by SQLSTATE (never message text).

- ``AWAY``: the database cannot take anything now (connection refused or lost, shutdown,
  read-only after a failover, too many connections): collect answers 503 for a moment without
  trying (every client backs off).
- ``JOB``: PostgreSQL refuses a value of this request (a data exception, a constraint, a row
  too large for an index, a trigger's error: the live writer's "row" classes,
  `_pg.store.rejects_row`): the same spans fail every time, so the request is split and only the
  part that still fails is refused.
- ``CONTENTION``: this request waited too long or lost a race (a lock or statement timeout,
  a deadlock met too often): that request alone is answered 503, retryable; once its spans
  failed so `REPEATS_REFUSED` times (a job whose row another session holds) it is split as
  for ``JOB``.
- ``OTHER``: anything else (a missing right, a table altered, disk full): that request alone
  is answered 503 and nothing is refused: the exporter keeps its spans until it is fixed.
"""

from __future__ import annotations

import enum
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable

import psycopg

from .._pg.store import rejects_row

__all__ = ["REPEATS_REFUSED", "Fault", "Repeats", "fault"]

REPEATS_REFUSED = 3  # the try on which spans that kept failing are split and refused
_REMEMBERED = 10_000  # span keys whose failures are remembered (the oldest forgotten)
# Classes and codes of a database that is away for every request.
_AWAY_CLASSES = frozenset({"08", "28", "3D"})  # connection, authorization, no such database
_AWAY_CODES = frozenset({
    "57P01",  # admin_shutdown
    "57P02",  # crash_shutdown
    "57P03",  # cannot_connect_now (starting up, or a standby in recovery)
    "25006",  # read_only_sql_transaction: a standby, or a primary demoted by a failover
    "53300",  # too_many_connections
})  # fmt: skip
_CONTENTION_CODES = frozenset({"55P03", "57014"})  # lock_not_available, query_canceled


class Fault(enum.Enum):
    AWAY = "away"
    JOB = "job"
    CONTENTION = "contention"
    OTHER = "other"


def fault(error: psycopg.Error) -> Fault:
    """What ``error`` (raised inside a request's transaction, or getting its connection) means."""
    if rejects_row(error):
        return Fault.JOB
    sqlstate = error.sqlstate
    if sqlstate is None:  # no answer from the server: refused, lost, timed out, a full pool
        return Fault.AWAY if isinstance(error, psycopg.OperationalError) else Fault.OTHER
    if sqlstate[:2] in _AWAY_CLASSES or sqlstate in _AWAY_CODES:
        return Fault.AWAY
    if sqlstate[:2] == "40" or sqlstate in _CONTENTION_CODES:
        return Fault.CONTENTION
    return Fault.OTHER


class Repeats:
    """How many times requests holding a span failed with a ``CONTENTION`` fault, per span key,
    for the newest `_REMEMBERED` keys; thread-safe."""

    def __init__(self) -> None:
        self._failed: OrderedDict[Hashable, int] = OrderedDict()
        self._lock = threading.Lock()

    def failed(self, keys: Iterable[Hashable]) -> int:
        """Count a failure of ``keys``; returns the most failures any of them has now."""
        most = 0
        with self._lock:
            failed = self._failed
            for key in keys:
                count = failed.pop(key, 0) + 1
                failed[key] = count
                most = max(most, count)
            while len(failed) > _REMEMBERED:
                failed.popitem(last=False)
        return most

    def __bool__(self) -> bool:
        """Whether any failure is remembered (read without the lock: a race keeps a count)."""
        return bool(self._failed)

    def forget(self, keys: Iterable[Hashable]) -> None:
        """``keys`` were committed or refused: nothing to remember."""
        with self._lock:
            for key in keys:
                self._failed.pop(key, None)
