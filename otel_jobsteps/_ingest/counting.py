"""What collect's metrics count: an attempt's closed steps and final row once it is complete
(its job span's end received, no start marker of it open), read from its rows after they are
written (or, where they are all the request's own inserts, taken from what it wrote), and after
that what later requests change of it. Nothing of an attempt still pending:
a later span may rewrite its rows (one a retry's start abandoned, before its own end arrived,
is a FAILED ``retry`` once it does). An attempt settled while pending is counted then."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .._core.times import EXACT_US
from .._telemetry.metrics import ClosedStep, Committed, FinishedAttempt
from .derive import Derivation
from .place import Attempt

__all__ = ["attempt_columns", "complete", "counted", "inserted_rows", "written_whole"]


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


def written_whole(
    found: Derivation, written: Committed, fresh: set[tuple[str, str]]
) -> set[Attempt]:
    """The complete attempts whose rows are all among what ``written`` inserted: of ``fresh``
    jobs (no row derived before this request), by a batch that only inserted: no step closed
    by an update (each such shows in ``written.steps``), no abandon, no sibling's failure; and
    every step's times stored as they are."""
    batch = found.batch
    if not fresh or written.steps or written.attempts:
        return set()
    if batch is not None and any(s.abandons or s.sibling_failures for s in batch.segments):
        return set()
    far = {
        (r.domain, r.job_id, r.attempt)
        for r in written.step_rows
        if not 0 <= r.created_us < EXACT_US or not 0 <= (r.ended_us or 0) < EXACT_US
    }
    return {a for a in complete(found) if a[:2] in fresh and a not in far}


def inserted_rows(written: Committed, attempts: set[Attempt]) -> list[tuple[Any, ...]]:
    """The closed steps and final rows ``written`` inserted of ``attempts`` (`written_whole`),
    as `counted_rows` reads them."""
    rows: list[tuple[Any, ...]] = [
        (r.trace_id, r.span_id, r.domain, r.job_id, r.attempt, r.job_type, r.step_key,
         r.step_status, None, _seconds(r.created_us, r.ended_us))
        for r in written.step_rows
        if (r.domain, r.job_id, r.attempt) in attempts and r.ended_us is not None
    ]  # fmt: skip
    rows += [
        (None, None, r.domain, r.job_id, r.attempt, r.job_type, None, r.status, r.reason, None)
        for r in written.log_rows
        if (r.domain, r.job_id, r.attempt) in attempts
    ]
    return rows


def _seconds(created_us: int, ended_us: int) -> float:
    """`job_duration` in seconds of times in the readable range: never negative; an exact
    integer division, rounded once as PostgreSQL's cast of the exact seconds rounds."""
    return max(ended_us - created_us, 0) / 1_000_000


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
