"""Bulk actions: the jobs the jobs list's filter selects (status, type, domain, since, tag, id
prefix), each acted on by `run_action`, in batches. A bulk action names its ``max``: more
jobs selected than that is refused before anything is done; ``dry_run`` answers the count (up
to max + 1) and the first ids only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .._cli.arguments import parse_duration
from .._core.limits import after_prefix
from .._core.vocabulary import STATUSES
from .._pg.db import Target, borrowed_connection
from ..errors import ConfigurationError
from ..query import list_jobs, parse_tag
from ..sql import qualified_queries
from .config import ActionsConfig
from .runner import Action, ActionResult, run_action

__all__ = [
    "BATCH_SIZE",
    "FILTER_KEYS",
    "MAX_BULK",
    "SHOWN_IDS",
    "BulkPlan",
    "JobFilter",
    "parse_filter",
    "plan_bulk",
    "run_bulk",
    "summary",
]

BATCH_SIZE = 10
MAX_BULK = 10_000  # the largest max a bulk action may name
SHOWN_IDS = 20
FILTER_KEYS = ("status", "type", "domain", "since", "tag", "prefix")


@dataclass(frozen=True)
class JobFilter:
    """The jobs list's filter (docs/web.md): each None leaves that condition out."""

    status: str | None = None
    job_type: str | None = None
    domain: str | None = None
    since: timedelta | None = None
    tag: tuple[str, str] | None = None
    prefix: str | None = None


def parse_filter(pairs: Mapping[str, Any]) -> JobFilter:
    """A filter from ``{key: text}`` (`FILTER_KEYS`); one ConfigurationError line per mistake."""
    unknown = sorted(set(pairs) - set(FILTER_KEYS))
    if unknown:
        raise ConfigurationError(f"unknown filter {unknown[0]!r} ({', '.join(FILTER_KEYS)})")
    texts = {key: _text(key, value) for key, value in pairs.items() if value not in (None, "")}
    status = texts.get("status", "").upper() or None
    if status is not None and status not in STATUSES:
        raise ConfigurationError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    try:
        since = parse_duration(texts["since"]) if "since" in texts else None
    except ValueError as error:
        raise ConfigurationError(str(error)) from None
    found = JobFilter(
        status=status,
        job_type=texts.get("type"),
        domain=texts.get("domain"),
        since=since,
        tag=parse_tag(texts["tag"]) if "tag" in texts else None,
        prefix=texts.get("prefix"),
    )
    if found.prefix is not None and (found.domain is None or found.tag is not None):
        raise ConfigurationError("an id prefix needs a domain, and goes without a tag")
    return found


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str) or "\x00" in value:
        raise ConfigurationError(f"filter {key!r} must be text without NUL characters")
    return value


@dataclass(frozen=True)
class BulkPlan:
    """The jobs a filter selected: (domain, job id) in the list's order, at most max + 1."""

    jobs: tuple[tuple[str, str], ...]
    max: int

    @property
    def over(self) -> bool:
        return len(self.jobs) > self.max

    def to_dict(self) -> dict[str, Any]:
        """The dry run's answer: the count (``max + 1`` reads as "more than max")."""
        shown = [{"domain": d, "job_id": j} for d, j in self.jobs[:SHOWN_IDS]]
        return {"count": len(self.jobs), "max": self.max, "over_max": self.over, "first": shown}


def plan_bulk(
    target: Target, chosen: JobFilter, max_jobs: int, *, schema: str = "public"
) -> BulkPlan:
    """Select the jobs ``chosen`` names, at most ``max_jobs`` + 1 of them."""
    if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or not 1 <= max_jobs <= MAX_BULK:
        raise ConfigurationError(f"max is required: a number of jobs from 1 to {MAX_BULK}")
    limit = max_jobs + 1
    if chosen.prefix is not None:
        params = {
            "domain": chosen.domain,
            "prefix": chosen.prefix,
            "upper": after_prefix(chosen.prefix),
            "job_type": chosen.job_type,
            "status": chosen.status,
            "since": chosen.since,
            "limit": limit,
        }
        query = qualified_queries("actions.sql", schema)["prefixed_jobs"]
        with borrowed_connection(target) as conn:
            rows = conn.execute(query, params).fetchall()
        return BulkPlan(tuple((str(d), str(j)) for d, j in rows), max_jobs)
    jobs = list_jobs(
        target,
        domain=chosen.domain,
        job_type=chosen.job_type,
        status=chosen.status,
        since=chosen.since,
        limit=limit,
        schema=schema,
        tag=chosen.tag,
    )
    return BulkPlan(tuple((job.domain, job.job_id) for job in jobs), max_jobs)


def run_bulk(
    target: Target,
    config: ActionsConfig,
    action: Action,
    plan: BulkPlan,
    *,
    actor: str,
    force: bool = False,
    idempotency_key: str | None = None,
    schema: str = "public",
    progress: Callable[[list[ActionResult]], None] | None = None,
    stop: threading.Event | None = None,
) -> list[ActionResult]:
    """Act on every planned job, `BATCH_SIZE` at a time (``progress(results so far)`` after each
    batch, and before an error ends the run), until ``stop`` is set (checked between batches);
    a plan over its max is refused whole. A key K becomes ``K:<domain>/<job id>``."""
    if plan.over:
        raise ConfigurationError(f"more than max ({plan.max}) jobs match: narrow the filter")
    results: list[ActionResult] = []
    try:
        for batch in _batches(plan.jobs, BATCH_SIZE):
            if stop is not None and stop.is_set():
                break
            for domain, job_id in batch:
                key = None if idempotency_key is None else f"{idempotency_key}:{domain}/{job_id}"
                results.append(
                    run_action(
                        target,
                        config,
                        action,
                        domain,
                        job_id,
                        actor=actor,
                        force=force,
                        idempotency_key=key,
                        schema=schema,
                    )
                )
            if progress is not None:
                progress(results)
    except Exception:
        if progress is not None and results:  # what was done before the error is reported
            progress(results)
        raise
    return results


def _batches(jobs: Iterable[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    batch: list[tuple[str, str]] = []
    for job in jobs:
        batch.append(job)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def summary(results: Iterable[ActionResult]) -> dict[str, int]:
    """How many actions ended in each outcome."""
    counted: dict[str, int] = {"done": 0, "refused": 0, "not_found": 0}
    for result in results:
        counted[result.outcome] += 1
    return counted
