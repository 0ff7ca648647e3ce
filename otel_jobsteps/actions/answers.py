"""What a queue answered an action: the outcome and its own words, one line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["DONE", "NOT_FOUND", "REFUSED", "Answer", "Outcome"]

Outcome = Literal["done", "refused", "not_found"]
DONE: Outcome = "done"
REFUSED: Outcome = "refused"  # the queue knows the job but cannot do this to it now
NOT_FOUND: Outcome = "not_found"  # the queue no longer knows the job


@dataclass(frozen=True)
class Answer:
    outcome: Outcome
    answer: str  # one line: what the queue did or why not
