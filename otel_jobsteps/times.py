"""The times every reader can hold: 1970-01-01 to 9999-12-30 UTC, one rule for writes and reads.

OTLP carries unsigned nanoseconds since 1970, and Python (so psycopg) has no year after 9999; the
day of margin keeps a time readable in any session time zone. The translation clamps span times
into the range; the read side loads a stored time outside what Python holds (rows an older
version wrote, or written by hand) as the nearest bound instead of failing the whole read.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import psycopg
from psycopg.abc import Buffer
from psycopg.types.datetime import TimestamptzBinaryLoader, TimestamptzLoader

__all__ = ["EARLIEST", "EARLIEST_NS", "LATEST", "LATEST_NS", "clamp_ns", "read_any_time"]

EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(9999, 12, 30, tzinfo=timezone.utc)
EARLIEST_NS = 0
LATEST_NS = int(LATEST.timestamp()) * 1_000_000_000


def clamp_ns(ns: int) -> int:
    """``ns`` (nanoseconds since 1970) moved into the range."""
    return EARLIEST_NS if ns < EARLIEST_NS else LATEST_NS if ns > LATEST_NS else ns


class _TextLoader(TimestamptzLoader):
    def load(self, data: Buffer) -> datetime:
        try:
            return super().load(data)
        except psycopg.DataError:  # year > 9999, BC or infinity: text says which side
            text = bytes(data)
            return EARLIEST if text.startswith(b"-") or text.endswith(b"BC") else LATEST


class _BinaryLoader(TimestamptzBinaryLoader):
    def load(self, data: Buffer) -> datetime:
        try:
            return super().load(data)
        except psycopg.DataError:  # microseconds since 2000 as a signed int64
            return EARLIEST if int.from_bytes(bytes(data)[:8], "big", signed=True) < 0 else LATEST


def read_any_time(conn: psycopg.Connection[Any]) -> None:
    """Make ``conn`` load a ``timestamptz`` Python cannot hold as the nearest bound."""
    conn.adapters.register_loader("timestamptz", _TextLoader)
    conn.adapters.register_loader("timestamptz", _BinaryLoader)
