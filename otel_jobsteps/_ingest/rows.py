"""A request's spans and log records as staged, by name: the key they are staged and sorted by
(their first three fields), their facts, and their bytes as received."""

from __future__ import annotations

from typing import NamedTuple

from .._core.facts import LogFacts, SpanFacts

__all__ = ["LogRow", "SpanRow"]


class SpanRow(NamedTuple):
    """A received span: its trace (hex), signed span id and phase (1: its ended copy, 0: a
    start marker), its facts, its bytes as received."""

    trace: str
    span_id: int
    phase: int
    facts: SpanFacts
    wire: bytes


class LogRow(NamedTuple):
    """A received log record: its trace (hex), its span's signed id, its key (`logs.log_key`),
    its place in its request, its facts, its bytes as received."""

    trace: str
    span_id: int
    key: bytes
    seq: int
    facts: LogFacts
    wire: bytes
