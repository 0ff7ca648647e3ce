"""The pure derivation: the staged spans and records of the jobs a request touched -> the
recorder's commands in the order the processor would have seen them live (`order`), the batch
that replaces their attempts' rows, and what to note of each attempt. No database here.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, NamedTuple

from .._core.batch import Batch
from .._core.commands import Command, JobStarted
from .._core.dialects import NO_DIALECTS, Dialects
from .._core.facts import LogFacts, SpanFacts
from .._core.interpreter import Interpreter, PerTrace
from .._core.order import in_span_order, latest_copies, with_logs
from .._core.recorder import DEFAULT_LOGS_MAX_PER_STEP, DEFAULT_MAX_OPEN_ATTEMPTS, StepRecorder
from .._core.translate import (
    DEFAULT_LOGS_MIN_SEVERITY,
    Problem,
    SpanTranslator,
    is_job_identity,
    late_attributes,
)
from ..attributes import JOB_ATTEMPT, JOB_DOMAIN, JOB_ID
from .ids import ID_MASK, signed
from .mapping import DIALECT_ATTRIBUTE, claimed, recognise_trace
from .place import JOB, Attempt
from .state import JobState, capture, held_by_job, restore

__all__ = [
    "Derivation",
    "JobSpan",
    "derive_jobs",
    "job_commands",
    "latest_copies",
    "resumable",
    "resume_jobs",
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
    states: dict[Job, JobState | None] = field(default_factory=dict)  # what the next resumes


def settled_start(attempt: Attempt, trace: str, span_id: int, start_ns: int) -> SpanFacts:
    """A settled attempt's job span as a start marker: all a derivation needs of it now."""
    domain, job_id, number = attempt
    names = {JOB_DOMAIN: domain, JOB_ID: job_id, JOB_ATTEMPT: number}
    start = start_ns & ID_MASK  # kept signed, as the ids: OTLP times reach 2**64 - 1
    return SpanFacts(int(trace, 16), span_id & ID_MASK, 0, "settled attempt", start, 0, names)


class _Told:
    """The interpreter's commands for one job, in order: applied after, with what they note."""

    def __init__(self) -> None:
        self.commands: list[Command] = []

    def handle(self, command: Command) -> None:
        self.commands.append(command)

    def resume(self, command: Command) -> None:
        self.commands.append(command)  # never asked: collect resumes from its derivation state


class _Replay:
    """One job's translations, one per trace, and the interpreter that tells them its ordered
    spans and records. Job attributes changed after a job span's start are counted for the
    ended copies in ``new`` only (None: all), once however often a job is derived again."""

    def __init__(
        self,
        problem: Problem,
        logs_min_severity: int,
        translators: dict[int, SpanTranslator] | None = None,
        new: Collection[tuple[int, int]] | None = None,
    ) -> None:
        self.translator = _translations(problem, logs_min_severity, new)
        self.translators = PerTrace(self.translator, translators)

    def commands(self, order: Sequence[tuple[bool, SpanFacts | LogFacts]]) -> list[Command]:
        """The commands of ``order`` (`_core.order`). A start is its ended copy, which may be
        the very next item (then the two are one reading), unless it is a start as its marker
        had it (`_started_as`: not ended)."""
        told = _Told()
        interpreter = Interpreter(self.translators, told)
        for is_start, item in order:
            if isinstance(item, LogFacts):
                interpreter.log(item)
            elif is_start:
                interpreter.start(item, ended=item.end_ns != 0)
            else:
                interpreter.end(item)
        interpreter.settle()
        return told.commands


def _translations(
    problem: Problem, logs_min_severity: int, new: Collection[tuple[int, int]] | None
) -> Callable[[], SpanTranslator]:
    """What makes a trace's translation for a `_Replay`: a closure, not a method of the replay,
    so the two make no reference cycle (a job's replay is freed at once, not by the cyclic
    collector, which ran once per 1,000-span request over everything the replays held)."""

    def late(span: SpanFacts) -> None:
        if new is None or (span.trace_id, span.span_id) in new:
            late_attributes(problem, span)

    return partial(SpanTranslator, problem=problem, logs_min_severity=logs_min_severity, late=late)


def _mapped_nodes(
    spans: Iterable[SpanFacts], dialects: Dialects
) -> dict[tuple[int, int], SpanFacts]:
    by_trace: dict[int, list[SpanFacts]] = {}
    for span in latest_copies(spans).values():
        by_trace.setdefault(span.trace_id, []).append(span)
    return {
        (trace, span.span_id): span
        for trace, group in by_trace.items()
        for span in recognise_trace(group, dialects)
    }


def _ordered(spans: Sequence[SpanFacts], dialects: Dialects) -> list[tuple[bool, SpanFacts]]:
    """The spans' starts and ends in order (`order`), a job span's start as its start marker
    had it: the job's identity and limits are read at its start (`_core.translate.SpanTranslator`),
    and the ended copy carries only their final values."""
    nodes = _mapped_nodes(spans, dialects)
    order = in_span_order(nodes)
    starts = _started_as(spans, nodes, dialects)
    if not starts:
        return order
    return [
        (True, starts[(span.trace_id, span.span_id)])
        if is_start and (span.trace_id, span.span_id) in starts
        else (is_start, span)
        for is_start, span in order
    ]


def _started_as(
    spans: Iterable[SpanFacts],
    nodes: Mapping[tuple[int, int], SpanFacts],
    dialects: Dialects,
) -> dict[tuple[int, int], SpanFacts]:
    """Per job span whose start marker and ended copy differ in the job's identity, limits or
    tags: its ended copy with the marker's values (none of them if the marker names no job:
    the ended copy names it only by its end). As `place.skeleton`, a marker is mapped alone."""
    found: dict[tuple[int, int], SpanFacts] = {}
    for marker in spans:
        if marker.end_ns:
            continue  # an ended copy: markers only, looked up before anything is built
        node = (marker.trace_id, marker.span_id)
        ended = nodes.get(node)
        if ended is None or not ended.end_ns:
            continue
        (marker,) = recognise_trace([marker], dialects)
        if JOB_ID not in marker.attributes and (
            JOB_ID not in ended.attributes or DIALECT_ATTRIBUTE in ended.attributes
        ):
            continue  # no job span, or a dialect's unit: read from its end (`units`)
        at_end = ended.attributes
        at_start = {k: v for k, v in marker.attributes.items() if is_job_identity(k)}
        if JOB_ID not in at_start:
            at_start = {}
        kept = {k: v for k, v in at_end.items() if not is_job_identity(k)}
        if len(kept) + len(at_start) != len(at_end) or any(
            k not in at_end or at_end[k] != v for k, v in at_start.items()
        ):
            found[node] = replace(ended, end_ns=0, attributes={**kept, **at_start})
    return found


def job_commands(
    spans: Iterable[SpanFacts],
    *,
    problem: Problem,
    dialects: Dialects = NO_DIALECTS,
    logs: Iterable[tuple[LogFacts, Any]] = (),
    logs_min_severity: int = DEFAULT_LOGS_MIN_SEVERITY,
) -> list[Command]:
    """The commands of the spans in span order and of the log records (each with its tie)
    in it (see `order`)."""
    spans = list(spans)
    order = with_logs(_ordered(spans, dialects), logs)
    return _Replay(problem, logs_min_severity).commands(order)


@dataclass(slots=True)
class _Gathered:
    """The spans of the jobs being derived, by job, and what is noted of their attempts."""

    by_job: dict[Job, list[SpanFacts]]
    known: set[Attempt]
    markers: dict[Attempt, set[tuple[str, int]]] = field(default_factory=dict)
    ended: set[tuple[str, int]] = field(default_factory=set)
    jobs_ended: set[Attempt] = field(default_factory=set)  # their job span's ended copy staged

    def add(self, span: JobSpan) -> None:
        self.by_job[span.attempt[:2]].append(span.facts)
        self.known.add(span.attempt)
        node = (span.trace, span.span_id)
        if span.ended:
            self.ended.add(node)
            if span.kind == JOB:
                self.jobs_ended.add(span.attempt)
        else:
            self.markers.setdefault(span.attempt, set()).add(node)

    def open_markers(self) -> dict[Attempt, set[tuple[str, int]]]:
        """Per attempt, its start markers whose ended copy is not staged."""
        found = {a: {m for m in seen if m not in self.ended} for a, seen in self.markers.items()}
        return {a: seen for a, seen in found.items() if seen}


def derive_jobs(
    jobs: Sequence[Job],
    spans: Iterable[JobSpan],
    *,
    attempts: Iterable[Attempt],
    started: Iterable[SpanFacts] = (),
    logs: Mapping[Job, Sequence[tuple[LogFacts, Any]]] | None = None,
    problem: Problem,
    dialects: Dialects = NO_DIALECTS,
    logs_min_severity: int = DEFAULT_LOGS_MIN_SEVERITY,
    logs_max_per_step: int = DEFAULT_LOGS_MAX_PER_STEP,
    new: Collection[tuple[int, int]] | None = None,
) -> Derivation:
    """Derive ``jobs`` from all their staged ``spans`` (``attempts``: theirs not settled) and
    records; settled attempts take part by their job span's start only (``started``): it
    abandons earlier attempts still open then, as live. ``new``: the (trace, span) ids of the
    ended copies this request brought (None: all are)."""
    gathered = _Gathered({job: [] for job in jobs}, set(attempts))
    for start in started:
        gathered.by_job[(start.attributes[JOB_DOMAIN], start.attributes[JOB_ID])].append(start)
    for span in spans:
        gathered.add(span)
    recorder = _recorder(len(gathered.known), logs_max_per_step)
    found = Derivation()
    replays: dict[Job, _Replay] = {}
    for job in jobs:
        job_logs = (logs or {}).get(job, ())
        replay = replays[job] = _Replay(problem, logs_min_severity, new=new)
        try:
            order = with_logs(_ordered(gathered.by_job[job], dialects), job_logs)
            commands = replay.commands(order)
        except Exception as error:  # noqa: BLE001 - one job must not fail the request
            # Its spans stay staged and its rows as they were; a later span derives it again.
            problem("derive_failed", error)
            found.failed.add(job)
            continue
        _apply(commands, recorder, found)
    found.derived = sorted(a for a in gathered.known if a[:2] not in found.failed)
    held = held_by_job(recorder)
    found.batch = recorder.take_batch()
    markers = gathered.open_markers()
    found.pending = set(markers) | {a for a in found.derived if a not in gathered.jobs_ended}
    markers_of, firsts_of = _of_job(markers), _of_job(found.firsts)
    ended_of = _of_job(dict.fromkeys(gathered.jobs_ended))
    for job in jobs:
        found.states[job] = None  # a failed job is derived in full next time
        if job not in found.failed:
            times = _latest(gathered.by_job[job], (logs or {}).get(job, ()))
            state = _state(
                times, markers_of.get(job, {}), ended_of.get(job, {}), firsts_of.get(job, {})
            )
            held_open = None if held is None else held.get(job, [])
            found.states[job] = capture(replays[job].translators.held, held_open, state)
    return found


def _recorder(attempts: int, logs_max_per_step: int) -> StepRecorder:
    return StepRecorder(
        debounce_ms=0,
        max_open_attempts=max(DEFAULT_MAX_OPEN_ATTEMPTS, attempts + 1),
        logs_max_per_step=logs_max_per_step,
    )


def _latest(spans: Iterable[SpanFacts], logs: Iterable[tuple[LogFacts, Any]]) -> JobState:
    """A state's times: the latest applied, the latest start, the latest record."""
    last_start = last_end = last_log = 0
    for span in spans:
        last_start = max(last_start, span.start_ns)
        last_end = max(last_end, span.end_ns)
    for record, _ in logs:
        last_log = max(last_log, record.time_ns)
    return JobState(max(last_start, last_end, last_log), last_start, last_log)


def _of_job(noted: Mapping[Attempt, Any]) -> dict[Job, dict[Attempt, Any]]:
    """Attempts' notes grouped by their job."""
    found: dict[Job, dict[Attempt, Any]] = {}
    for attempt, value in noted.items():
        found.setdefault(attempt[:2], {})[attempt] = value
    return found


def _state(
    times: JobState,
    markers: Mapping[Attempt, set[tuple[str, int]]],
    ended: Iterable[Attempt],
    firsts: Mapping[Attempt, tuple[str, int, int]],
) -> JobState:
    """A job's notes for its state, of its own attempts (its translators and attempts are
    captured after)."""
    times.markers = {a: set(m) for a, m in markers.items()}
    times.ended = set(ended)
    times.firsts = dict(firsts)
    return times


def resumable(state: JobState, spans: Iterable[JobSpan], dialects: Dialects) -> bool:
    """Whether a job's new spans can be applied on its state: each starts after everything
    applied (so the full order is the old one, then the new spans'), none is the ended copy of
    a start marker applied, none is a unit's span that a dialect claims (a unit is read whole:
    the spans inside one start before its end, so they are never after its state), and no two
    end at one time (their order would depend on ancestors the state does not keep)."""
    ends: set[int] = set()
    markers = set().union(*state.markers.values()) if state.markers else set()
    new = {(span.facts.trace_id, span.facts.span_id) for span in spans}
    for span in spans:
        facts = span.facts
        if (span.trace, span.span_id) in markers or not _after(state, facts, new):
            return False
        if facts.end_ns and facts.end_ns < facts.start_ns:
            return False
        if facts.end_ns > facts.start_ns:
            if facts.end_ns in ends:
                return False
            ends.add(facts.end_ns)
        if claimed(facts, dialects):
            return False
    return True


def _after(state: JobState, facts: SpanFacts, new: set[tuple[int, int]]) -> bool:
    """Whether the span's start comes after everything applied: later, or at the latest
    time when only ends were applied then (ends go first) and its parent has not ended."""
    if facts.start_ns > state.frontier:
        return True
    if facts.start_ns < state.frontier or state.last_start >= facts.start_ns:
        return False
    parent = facts.parent_span_id
    in_open = state.holds_open(facts.trace_id, parent) or (facts.trace_id, parent) in new
    return in_open and state.last_log < facts.start_ns


def resume_jobs(
    states: Mapping[Job, JobState],
    spans: Iterable[JobSpan],
    *,
    attempts: Iterable[Attempt],
    problem: Problem,
    logs_min_severity: int = DEFAULT_LOGS_MIN_SEVERITY,
    logs_max_per_step: int = DEFAULT_LOGS_MAX_PER_STEP,
) -> Derivation:
    """Apply each job's new ``spans`` (`resumable`) on its state: the commands the full
    derivation would add after the ones it applied before, and the rows they change."""
    gathered = _Gathered({job: [] for job in states}, set(attempts))
    for span in spans:
        gathered.add(span)
    recorder = _recorder(len(gathered.known) + len(states), logs_max_per_step)
    found = Derivation()
    new_markers = _of_job(gathered.open_markers())
    new_ended = _of_job(dict.fromkeys(gathered.jobs_ended))
    known = _of_job(dict.fromkeys(gathered.known))
    noted: dict[Job, tuple[JobState, dict[int, SpanTranslator]]] = {}
    for job, state in states.items():
        replay = _Replay(problem, logs_min_severity)  # every span here is new
        replay.translators.held = restore(state, recorder, replay.translator)
        found.firsts.update(state.firsts)
        _apply(replay.commands(_ordered(gathered.by_job[job], NO_DIALECTS)), recorder, found)
        markers = {a: set(m) for a, m in state.markers.items()}
        for attempt, seen in new_markers.get(job, {}).items():
            markers.setdefault(attempt, set()).update(seen)
        ended = state.ended | set(new_ended.get(job, ()))
        times = _latest(gathered.by_job[job], ())
        times.frontier = max(times.frontier, state.frontier)
        times.last_start = max(times.last_start, state.last_start)
        times.last_log = state.last_log
        found.pending |= set(markers)
        found.pending |= {a for a in known.get(job, ()) if a not in ended}
        noted[job] = (_state(times, markers, ended, {}), replay.translators.held)
    held = held_by_job(recorder)
    firsts = _of_job(found.firsts)
    for job, (state, translators) in noted.items():
        state.firsts = dict(firsts.get(job, {}))
        held_open = None if held is None else held.get(job, [])
        found.states[job] = capture(translators, held_open, state)
    found.derived = sorted(a for a in gathered.known if a[:2] not in found.failed)
    found.batch = recorder.take_batch()
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
