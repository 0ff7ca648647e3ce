"""What a request changed, as its answer and metrics tell it."""

from __future__ import annotations

from dataclasses import dataclass

from .._metrics import Committed

__all__ = ["Receipt", "Transaction"]


@dataclass(frozen=True, slots=True)
class Receipt:
    """Spans (records) new, copies, late copies (dropped), over the trace's limit (rejected),
    and of records how many wait for their span."""

    staged: int
    duplicates: int
    late: int
    rejected: int = 0
    waiting: int = 0


@dataclass(slots=True)
class Transaction:
    """A request's transaction: its id, and what it changed once its statements all ran (kept
    should its COMMIT go unanswered)."""

    txid: int | None = None
    committed: Committed | None = None
