"""The pure derivation: the staged spans and records of the jobs a request touched -> the
recorder's commands in the order the processor would have seen them live (`order`), the batch
that replaces their attempts' rows, and what to note of each attempt. No database here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .._batch import Batch
from .._facts import LogFacts, SpanFacts
from .._recorder import (
    DEFAULT_LOGS_MAX_PER_STEP,
    DEFAULT_MAX_OPEN_ATTEMPTS,
    Command,
    JobStarted,
    StepRecorder,
)
from .._translate import DEFAULT_LOGS_MIN_SEVERITY, Problem, SpanTranslator
from ..attributes import JOB_ATTEMPT, JOB_DOMAIN, JOB_EVENT_TYPE, JOB_ID
from .ids import ID_MASK, signed
from .mapping import JobMapping, map_trace
from .order import in_span_order, latest_copies, with_logs
from .place import JOB, Attempt

__all__ = [
    "Derivation",
    "JobSpan",
    "derive_jobs",
    "job_commands",
    "latest_copies",
    "settled_start",
    "with_logs",
]

Job = tuple[str, str]  # domain, job id


class JobSpan(NamedTuple):
    """A staged span of an attempt being derived: its trace and signed id, whether this is its
    ended copy, its facts, its kind (`place`) and its attempt."""

    trace: str
    span_id: int
    ended: bool
    facts: SpanFacts
    kind: int
    attempt: Attempt


@dataclass(slots=True)
class Derivation:
    """What a derivation decided: the rows of ``derived`` attempts (``batch``), which of them
    still wait for a span (``pending``), each one's job span start (trace, signed span id and
    start), later attempts' starts (they abandon settled earlier ones), and failed jobs."""

    batch: Batch | None = None
    derived: list[Attempt] = field(default_factory=list)
    pending: set[Attempt] = field(default_factory=set)
    firsts: dict[Attempt, tuple[str, int, int]] = field(default_factory=dict)
    starts: list[tuple[str, str, int, int]] = field(default_factory=list)
    failed: set[Job] = field(default_factory=set)


def settled_start(attempt: Attempt, trace: str, span_id: int, start_ns: int) -> SpanFacts:
    """A settled attempt's job span as a start marker: all a derivation needs of it now."""
    domain, job_id, number = attempt
    names = {JOB_DOMAIN: domain, JOB_ID: job_id, JOB_ATTEMPT: number}
    start = start_ns & ID_MASK  # kept signed, as the ids: OTLP times reach 2**64 - 1
    return SpanFacts(int(trace, 16), span_id & ID_MASK, 0, "settled attempt", start, 0, names)


def job_commands(
    spans: Iterable[SpanFacts],
    *,
    problem: Problem,
    mappings: Sequence[JobMapping] = (),
    logs: Iterable[tuple[LogFacts, Any]] = (),
    logs_min_severity: int = DEFAULT_LOGS_MIN_SEVERITY,
) -> list[Command]:
    """The commands of the spans in span order and of the log records (each with its tie)
    in it (see `order`); each trace has its own translator (span ids are unique within a
    trace only)."""
    by_trace: dict[int, list[SpanFacts]] = {}
    for span in latest_copies(spans).values():
        by_trace.setdefault(span.trace_id, []).append(span)
    nodes = {
        (trace, span.span_id): span
        for trace, group in by_trace.items()
        for span in map_trace(group, mappings)
    }
    translators: dict[int, SpanTranslator] = {}
    commands: list[Command] = []
    for is_start, item in with_logs(in_span_order(nodes), logs):
        if isinstance(item, LogFacts):
            found = translators.get(item.trace_id)
            if found is not None:
                commands.extend(found.log(item))
            continue
        span = item
        translator = translators.get(span.trace_id)
        if translator is None:
            translator = translators[span.trace_id] = SpanTranslator(
                problem=problem, logs_min_severity=logs_min_severity
            )
        if is_start:
            commands.extend(translator.started(span))
        elif JOB_EVENT_TYPE not in span.attributes:  # an event span is complete at its start
            commands.extend(translator.ended(span))
    return commands


def derive_jobs(
    jobs: Sequence[Job],
    spans: Iterable[JobSpan],
    *,
    attempts: Iterable[Attempt],
    started: Iterable[SpanFacts] = (),
    logs: Mapping[Job, Sequence[tuple[LogFacts, Any]]] | None = None,
    problem: Problem,
    mappings: Sequence[JobMapping] = (),
    logs_min_severity: int = DEFAULT_LOGS_MIN_SEVERITY,
    logs_max_per_step: int = DEFAULT_LOGS_MAX_PER_STEP,
) -> Derivation:
    """Derive ``jobs`` from all their staged ``spans`` (``attempts``: theirs not settled) and
    records; settled attempts take part by their job span's start only (``started``): it
    abandons earlier attempts still open then, as live."""
    by_job: dict[Job, list[SpanFacts]] = {job: [] for job in jobs}
    for start in started:
        by_job[(start.attributes[JOB_DOMAIN], start.attributes[JOB_ID])].append(start)
    known = set(attempts)
    markers: dict[Attempt, list[tuple[str, int]]] = {}
    ended: set[tuple[str, int]] = set()
    jobs_ended: set[Attempt] = set()  # attempts whose job span's ended copy is staged
    for span in spans:
        by_job[span.attempt[:2]].append(span.facts)
        known.add(span.attempt)
        if span.ended:
            ended.add((span.trace, span.span_id))
            if span.kind == JOB:
                jobs_ended.add(span.attempt)
        else:
            markers.setdefault(span.attempt, []).append((span.trace, span.span_id))
    recorder = StepRecorder(
        debounce_ms=0,
        max_open_attempts=max(DEFAULT_MAX_OPEN_ATTEMPTS, len(known) + 1),
        logs_max_per_step=logs_max_per_step,
    )
    found = Derivation()
    for job in jobs:
        try:
            commands = job_commands(
                by_job[job],
                problem=problem,
                mappings=mappings,
                logs=(logs or {}).get(job, ()),
                logs_min_severity=logs_min_severity,
            )
        except Exception as error:  # noqa: BLE001 - one job must not fail the request
            # Its spans stay staged and its rows as they were; a later span derives it again.
            problem("derive_failed", error)
            found.failed.add(job)
            continue
        _apply(commands, recorder, found)
    found.derived = sorted(a for a in known if a[:2] not in found.failed)
    found.batch = recorder.take_batch()
    found.pending = {a for a, seen in markers.items() if any(m not in ended for m in seen)}
    found.pending.update(a for a in found.derived if a not in jobs_ended)
    return found


def _apply(commands: list[Command], recorder: StepRecorder, found: Derivation) -> None:
    """Feed a job's commands to the recorder, noting each attempt's first job span start."""
    for command in commands:
        recorder.handle(command)
        if isinstance(command, JobStarted):
            scope = command.scope
            where = (scope.domain, scope.job_id, scope.attempt)
            first = (
                format(scope.trace_id, "032x"),
                signed(scope.span_id),
                signed(command.start_ns),
            )
            found.firsts.setdefault(where, first)
            if scope.attempt > 1:
                found.starts.append((*where, command.start_ns))
