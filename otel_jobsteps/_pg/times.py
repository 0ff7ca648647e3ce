"""Reads load a stored ``timestamptz`` beyond the range every reader can hold (`_core.times`) as
the nearest bound, not an error: psycopg's loader with that bound."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg.abc import AdaptContext, Buffer
from psycopg.adapt import Loader
from psycopg.postgres import types
from psycopg.pq import Format

from .._core.times import EARLIEST, LATEST

__all__ = ["read_any_time"]


_TIMESTAMPTZ = types["timestamptz"].oid


class _AnyTimeLoader(Loader):
    """psycopg's own loader (its C one when installed), with a bound where it raises."""

    def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
        super().__init__(oid, context)
        loader = psycopg.adapters.get_loader(oid, self.format)
        assert loader is not None
        self._load = loader(oid, context).load

    def load(self, data: Buffer) -> datetime:
        try:
            return self._load(data)  # type: ignore[no-any-return]
        except psycopg.DataError:  # after year 9999, BC or infinity
            return EARLIEST if self._before_1970(bytes(data)) else LATEST

    def _before_1970(self, data: bytes) -> bool:
        return data.startswith(b"-") or data.endswith(b"BC")


class _AnyTimeBinaryLoader(_AnyTimeLoader):
    format = Format.BINARY

    def _before_1970(self, data: bytes) -> bool:
        return int.from_bytes(data[:8], "big", signed=True) < 0  # microseconds since 2000


def read_any_time(target: psycopg.Connection[Any] | psycopg.Cursor[Any]) -> None:
    """Make ``target`` load a ``timestamptz`` Python cannot hold as the nearest bound (on a
    cursor of a caller's connection: for our reads only, their connection left as it is)."""
    target.adapters.register_loader(_TIMESTAMPTZ, _AnyTimeLoader)
    target.adapters.register_loader(_TIMESTAMPTZ, _AnyTimeBinaryLoader)
