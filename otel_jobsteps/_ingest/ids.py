"""Span ids and times as staged: PostgreSQL's bigint is signed, OTLP's 64-bit values are not."""

from __future__ import annotations

__all__ = ["ID_MASK", "signed"]

ID_MASK = (1 << 64) - 1  # a signed bigint's bits as the unsigned value


def signed(value: int) -> int:
    """An unsigned 64-bit value as the bigint that stores it."""
    return value - (1 << 64) if value >= 1 << 63 else value
