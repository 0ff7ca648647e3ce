"""The times every reader can hold: 1970-01-01 to 9999-12-30 UTC, one rule for writes and reads.

Writes clamp into the range; reads load a stored time beyond it as the nearest bound, not an error.
"""

from __future__ import annotations

from datetime import datetime, timezone

__all__ = ["EARLIEST", "EARLIEST_NS", "EXACT_US", "LATEST", "LATEST_NS", "clamp_ns"]

EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(9999, 12, 30, tzinfo=timezone.utc)
EARLIEST_NS = 0
LATEST_NS = int(LATEST.timestamp()) * 1_000_000_000
# The writer's statements store a time as a float8 factor of an interval: microseconds since
# 1970 are stored exactly up to here (about the year 2255), rounded as a float8 after it.
EXACT_US = 2**53


def clamp_ns(ns: int) -> int:
    """``ns`` (nanoseconds since 1970) moved into the range."""
    return EARLIEST_NS if ns < EARLIEST_NS else LATEST_NS if ns > LATEST_NS else ns
