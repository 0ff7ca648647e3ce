"""What collect's metrics count: an attempt's closed steps and final row once it is complete
(its job span's end received, no start marker of it open), read from its rows after they are
written, and after that what later requests change of it. Nothing of an attempt still pending:
a later span may rewrite its rows (one a retry's start abandoned, before its own end arrived,
is a FAILED ``retry`` once it does). An attempt settled while pending is counted then."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .._telemetry.metrics import ClosedStep, Committed, FinishedAttempt
from .derive import Derivation
from .place import Attempt

__all__ = ["attempt_columns", "complete", "counted"]


def attempt_columns(attempts: Sequence[Attempt]) -> dict[str, list[Any]]:
    """The attempts as the column arrays the SQL unnests."""
    return {
        "domain": [a[0] for a in attempts],
        "job_id": [a[1] for a in attempts],
        "attempt": [a[2] for a in attempts],
    }


def complete(found: Derivation) -> list[Attempt]:
    """The derivation's attempts whose rows are complete now (none of them pending)."""
    return [a for a in found.derived if a not in found.pending]


def counted(
    rows: Iterable[Sequence[Any]],
    *,
    written: Committed | None = None,
    before: set[Attempt] | frozenset[Attempt] = frozenset(),
) -> Committed:
    """What to count of complete attempts: ``rows`` (`counted_rows`: theirs, as they are now)
    of those not complete ``before``, whole; of those that were (counted then), only what
    this transaction ``written`` changed."""
    found = Committed()
    owners: dict[tuple[Any, Any], Attempt] = {}
    for trace, span, domain, job_id, number, job_type, key, status, reason, seconds in rows:
        attempt = (domain, job_id, number)
        if seconds is not None:
            owners[(trace, span)] = attempt
        if attempt in before:
            continue
        if seconds is None:
            found.attempts.append(FinishedAttempt(domain, job_id, number, job_type, status, reason))
        else:
            found.steps.append(ClosedStep(trace, span, domain, job_type, key, status, seconds))
    if written is not None and before:
        found.steps += [
            step
            for step in written.closed_steps()
            if owners.get((step.trace_id, step.span_id)) in before
        ]
        found.attempts += [
            a for a in written.finished_attempts() if (a.domain, a.job_id, a.attempt) in before
        ]
    return found
