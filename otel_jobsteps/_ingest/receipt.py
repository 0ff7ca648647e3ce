"""What a request changed, as its answer and metrics tell it."""

from __future__ import annotations

from dataclasses import dataclass

from .._telemetry.metrics import Committed

__all__ = ["Receipt", "Transaction"]


@dataclass(frozen=True, slots=True)
class Receipt:
    """Spans (records) new, copies, late copies (dropped), rejected (over the trace's limit,
    or refused: ``reason`` says why), and of records how many wait for their span."""

    staged: int
    duplicates: int
    late: int
    rejected: int = 0
    waiting: int = 0
    reason: str = ""  # why spans were refused (a statement failed for them), if any were


@dataclass(slots=True)
class Transaction:
    """A request's transaction: its id, and what it changed once its statements all ran (kept
    should its COMMIT go unanswered)."""

    txid: int | None = None
    committed: Committed | None = None
