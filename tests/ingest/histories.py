"""Random job histories told live through a real tracer with explicit span times: 1-4 attempts
of one job over 1-3 traces (a shared producer trace or fresh ones), overlapping attempts and
zombies, long gaps, steps that last no time, steps ending after their job span, events, a job
type set after the job span started, and a clock as coarse as a tick. The processor sees them in
time order: its rows are the reference."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from opentelemetry._logs import Logger, SeverityNumber
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanMessage
from opentelemetry.trace import Span, Status, StatusCode, Tracer, set_span_in_context

from otel_jobsteps.attributes import (
    JOB_ATTEMPT,
    JOB_DOMAIN,
    JOB_EVENT_MESSAGE,
    JOB_EVENT_TYPE,
    JOB_ID,
    JOB_STEP_KEY,
    JOB_TYPE,
)

DOMAIN = "history"
BASE_NS = 1_800_000_000_000_000_000
TICKS_NS = (1, 1_000_000, 15_600_000)  # the SDK's nanoseconds, Node's milliseconds, Windows'


@dataclass(frozen=True)
class StepPlan:
    """One step: how long it lasts (µs, 0: no time) and the pause before the next one."""

    duration_us: int
    pause_us: int
    fails: bool = False
    event: bool = False  # an ordinary event inside it
    progress: bool = False  # progress events (only told in the last attempt, see below)
    logs: bool = False  # log records in it (INFO, DEBUG, WARN; a progress log event) and after


@dataclass(frozen=True)
class AttemptPlan:
    """One attempt: its trace (0: the producer's, shared; 1, 2: its own), the gap since the
    previous attempt started (µs), its steps, and how it ends."""

    trace: int
    gap_us: int
    steps: tuple[StepPlan, ...]
    fails: bool = False
    last_step_outlives_job: bool = False  # the job span ends before its last step does
    names_itself: bool = False  # an event span outside it naming the job and this attempt
    late_type: bool = False  # the job sets another job.type once its job span started


@dataclass(frozen=True)
class History:
    attempts: tuple[AttemptPlan, ...]
    tick_ns: int


_durations = st.one_of(st.just(0), st.integers(1, 40_000))
steps = st.builds(
    StepPlan,
    duration_us=_durations,
    pause_us=st.one_of(st.just(0), st.integers(1, 5_000)),
    fails=st.booleans(),
    event=st.booleans(),
    progress=st.booleans(),
    logs=st.booleans(),
)
attempts = st.builds(
    AttemptPlan,
    trace=st.integers(0, 2),
    gap_us=st.one_of(st.integers(1, 60_000), st.integers(600_000_000, 700_000_000)),
    steps=st.lists(steps, max_size=3).map(tuple),
    fails=st.booleans(),
    last_step_outlives_job=st.booleans(),
    names_itself=st.booleans(),
    late_type=st.booleans(),
)
histories = st.builds(
    History,
    attempts=st.lists(attempts, min_size=1, max_size=4).map(tuple),
    tick_ns=st.sampled_from(TICKS_NS),
)


def random_history(rng: random.Random) -> History:
    """A history drawn from ``rng`` (for tests that are not property tests, and benchmarks)."""

    def step() -> StepPlan:
        return StepPlan(rng.choice((0, rng.randint(1, 40_000))), rng.randint(0, 5_000),
                        rng.random() < 0.3, rng.random() < 0.3)  # fmt: skip

    def attempt() -> AttemptPlan:
        return AttemptPlan(rng.randint(0, 2), rng.choice((rng.randint(1, 60_000), 600_000_000)),
                           tuple(step() for _ in range(rng.randint(0, 3))), rng.random() < 0.5,
                           rng.random() < 0.2, rng.random() < 0.2)  # fmt: skip

    attempts = tuple(attempt() for _ in range(rng.randint(1, 4)))
    return History(attempts, rng.choice(TICKS_NS))


# (SeverityNumber, body, more) of the records a step with logs emits; DEBUG is below the default.
_LOG_LINES: tuple[tuple[int, str, dict[str, Any]], ...] = (
    (9, "rendering", {"attributes": {"frames": 3}}),
    (5, "noise in", {}),
    (13, "slow", {"attributes": {"ms": 250}}),
    (9, "", {"event_name": "progress", "attributes": {"done": 2}}),
)


@dataclass
class _Action:
    at_us: int
    attempt: int  # 1-based; 0: the producer
    kind: str  # start, end, progress, log, set (attributes on a running span)
    name: str
    parent: str | None = None  # the name of the parent span; None: a root
    attributes: dict[str, Any] = field(default_factory=dict)
    fails: bool = False
    own_tick: bool = False  # later than the tick of the action before (see _times)


def _actions(history: History, job_id: str) -> list[_Action]:
    """The history's span starts, ends and progress events, in time order (µs, distinct)."""
    actions = [_Action(0, 0, "start", "enqueue"), _Action(1, 0, "end", "enqueue")]
    start = 1
    last = len(history.attempts)
    for number, plan in enumerate(history.attempts, 1):
        start += plan.gap_us
        job = f"job{number}"
        parent = "enqueue" if plan.trace == 0 else None
        job_attributes = {JOB_DOMAIN: DOMAIN, JOB_ID: job_id, JOB_TYPE: "t", JOB_ATTEMPT: number}
        actions.append(_Action(start, number, "start", job, parent, job_attributes))
        if plan.late_type:  # right after its start (the sort keeps their order)
            actions.append(_Action(start, number, "set", job, attributes={JOB_TYPE: "t-late"}))
        at = start + 1
        step_end = at
        between: list[_Action] = []
        for index, step in enumerate(plan.steps):
            name = f"{job}.step{index}"
            actions.append(_Action(at, number, "start", name, job, {JOB_STEP_KEY: f"S{index}"}))
            inner = at
            if step.event:
                inner += 1 if step.duration_us else 0
                actions.append(
                    _Action(inner, number, "event", f"{name}.event", name,
                            {JOB_EVENT_TYPE: "LOG", JOB_EVENT_MESSAGE: f"in {name}"})
                )  # fmt: skip
            if step.progress and number == last and not plan.last_step_outlives_job:
                # Progress only where no other attempt abandons the step: the processor writes
                # an abandoned step's progress as its watch polled it, by the wall clock.
                for n in (1, 2):
                    inner += 1 if step.duration_us else 0
                    actions.append(_Action(inner, number, "progress", name, attributes={"n": n}))
            if step.logs:
                progress_too = number == last and not plan.last_step_outlives_job
                for severity, body, extra in _LOG_LINES[: 4 if progress_too else 3]:
                    inner += 1 if step.duration_us else 0
                    attributes = {"severity": severity, "body": f"{body} {name}", **extra}
                    actions.append(_Action(inner, number, "log", name, attributes=attributes))
            step_end = max(at + step.duration_us, inner)
            actions.append(_Action(step_end, number, "end", name, fails=step.fails))
            if step.logs:  # in the job span's own context, between steps
                attributes = {"severity": 9, "body": f"after {name}"}
                between.append(_Action(step_end, number, "log", job, attributes=attributes))
            at = step_end + step.pause_us
        job_end = max(at, step_end) + 1
        outlived = plan.last_step_outlives_job and bool(plan.steps)
        if outlived:
            # The job span ends while its last step runs: in a tick of its own, or the tie rule
            # (a child's end before its parent's) would read the step as ended first.
            step_ended = actions[-1]
            job_end = max(step_ended.at_us, actions[-2].at_us + 1)
            step_ended.at_us, step_ended.own_tick = job_end + 1 + plan.steps[-1].pause_us, True
        actions.extend(between)
        actions.append(_Action(job_end, number, "end", job, fails=plan.fails, own_tick=outlived))
        if plan.names_itself:
            actions.append(
                _Action(job_end + 2, number, "event", f"{job}.named", None,
                        {**job_attributes, JOB_EVENT_TYPE: "NOTE", JOB_EVENT_MESSAGE: "named"})
            )  # fmt: skip
    actions.sort(key=lambda a: a.at_us)
    return actions


def _times(actions: list[_Action], tick_ns: int, base_ns: int) -> Iterator[tuple[_Action, int]]:
    """Each action's time on a clock of ``tick_ns``; actions of two attempts never share a tick
    (which of them came first would be a guess), so a new attempt's action waits for the next,
    as does an action marked ``own_tick``."""
    shift = 0
    previous: tuple[int, int] | None = None
    for action in actions:
        at_ns = base_ns + action.at_us * 1000 + shift
        tick = at_ns // tick_ns
        apart = previous is not None and (previous[0] != action.attempt or action.own_tick)
        if previous is not None and apart and tick <= previous[1]:
            shift += (previous[1] + 1 - tick) * tick_ns
            tick = previous[1] + 1
        previous = (action.attempt, tick)
        yield action, tick * tick_ns


def _timed(history: History, job_id: str, base_ns: int) -> list[tuple[_Action, int]]:
    """The actions with their times; two steps of one attempt that both last no time on this
    clock never share a tick (which came first is unknown: the documented limit of the tie
    rule), the later one waits for the next."""
    actions = _actions(history, job_id)
    while True:
        timed = list(_times(actions, history.tick_ns, base_ns))
        at = {(a.name, a.kind): t for a, t in timed}
        previous: dict[int, _Action] = {}
        marked = False
        for action, at_ns in timed:
            if action.kind != "start" or JOB_STEP_KEY not in action.attributes:
                continue
            before = previous.get(action.attempt)
            previous[action.attempt] = action
            if before is None or action.own_tick:
                continue
            zero = at[(action.name, "end")] == at_ns
            if zero and at[(before.name, "end")] == at[(before.name, "start")] == at_ns:
                action.own_tick = marked = True
        if not marked:
            return timed


def tell(
    history: History,
    tracer: Tracer,
    job_id: str,
    base_ns: int = BASE_NS,
    logger: Logger | None = None,
) -> dict[int, int]:
    """Tell ``history`` live from ``base_ns`` (its log records through ``logger``, if any);
    returns each span's attempt (by span id; 0: outside any)."""
    live: dict[str, Span] = {}
    attempt_of: dict[int, int] = {}
    for action, at_ns in _timed(history, job_id, base_ns):
        if action.kind == "log":
            if logger is not None:
                line = action.attributes
                logger.emit(
                    timestamp=at_ns,
                    context=set_span_in_context(live[action.name]),
                    severity_number=SeverityNumber(line["severity"]),
                    body=line["body"] or None,
                    attributes=line.get("attributes", {}),
                    event_name=line.get("event_name"),
                )
            continue
        if action.kind == "set":
            live[action.name].set_attributes(action.attributes)
            continue
        if action.kind == "progress":
            live[action.name].add_event("progress", action.attributes, timestamp=at_ns)
            continue
        if action.kind == "end":
            span = live[action.name]
            if action.fails:
                span.set_status(Status(StatusCode.ERROR, f"{action.name} failed"))
            span.end(end_time=at_ns)
            continue
        parent = live.get(action.parent) if action.parent else None
        context = set_span_in_context(parent) if parent is not None else None
        span = tracer.start_span(
            action.name, context=context, attributes=action.attributes, start_time=at_ns
        )
        attempt_of[span.get_span_context().span_id] = action.attempt
        if action.kind == "event":
            span.end(end_time=at_ns)
        else:
            live[action.name] = span
    return attempt_of


def as_started(marker: SpanMessage) -> bool:
    """Give a start marker made from an ended job span the type its job started with (a
    StartMarkerProcessor sends it at the start; OTLP's ended copy has the type set late).
    Whether the marker names a type set late."""
    for pair in marker.attributes:
        if pair.key == JOB_TYPE and pair.value.string_value == "t-late":
            pair.value.string_value = "t"
            return True
    return False
