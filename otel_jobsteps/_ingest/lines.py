"""Log records written as LOG rows without deriving their attempt again: each translated in
its context rebuilt from the staged skeletons (its attempt's job span, the step its span lies
in), and kept under the per-step cap. Pure: the rows and counts come from `records`."""

from __future__ import annotations

from typing import Any

from .._commands import Command, LogRecorded
from .._facts import LogFacts, SpanFacts
from .._recorder import StepRecorder
from .._stats import Stats
from .._translate import SpanTranslator
from ..attributes import JOB_ATTEMPT, JOB_DOMAIN, JOB_EXECUTION, JOB_ID, JOB_STEP_KEY, JOB_TYPE
from .ids import ID_MASK, signed
from .place import EVENT, JOB, NAMING_EVENT, Attempt, Staged

__all__ = ["LineContexts", "Names", "StepCount", "direct_lines", "settled_lines"]

Names = dict[Attempt, tuple[str | None, str | None]]  # each attempt's type and execution
StepCount = tuple[str, str, int, str | None]  # an attempt and a step key


class LineContexts:
    """Records translated in contexts rebuilt from skeletons: one translator per trace and
    attempt, its spans started once."""

    def __init__(
        self, nodes: dict[tuple[str, int], Staged], names: Names, stats: Stats, min_severity: int
    ) -> None:
        self._nodes = nodes
        self._names = names
        self._stats = stats
        self._min_severity = min_severity
        self._translators: dict[tuple[str, Attempt], SpanTranslator] = {}
        self._rebuilt: set[tuple[str, Attempt, int]] = set()  # spans the translators started

    def lines(self, facts: LogFacts, where: Attempt) -> list[LogRecorded] | None:
        """The record's LOG commands (progress of a closed step: none), or None when its
        context cannot be rebuilt so."""
        commands = self._commands(facts, where)
        if commands is None:
            return None
        return [command for command in commands if isinstance(command, LogRecorded)]

    def _commands(self, facts: LogFacts, where: Attempt) -> list[Command] | None:
        trace = format(facts.trace_id, "032x")
        translator = self._translators.get((trace, where))
        if translator is None:
            translator = self._translators[(trace, where)] = SpanTranslator(
                problem=self._stats.problem, logs_min_severity=self._min_severity
            )
        if (trace, where, facts.span_id) in self._rebuilt:
            return translator.log(facts)
        chain = self._chain(trace, facts.span_id)
        if chain is None:
            return None
        job_type, execution = self._names.get(where, (None, None))
        job_span = chain[-1][0]
        attributes: dict[str, Any] = {JOB_DOMAIN: where[0], JOB_ID: where[1], JOB_ATTEMPT: where[2]}
        if job_type is not None:
            attributes[JOB_TYPE] = job_type
        attributes[JOB_EXECUTION] = execution or f"{trace}:{job_span:016x}"
        parent = 0
        for span_id, node in reversed(chain):
            names_of = attributes if span_id == job_span else {}
            if node.step_key is not None and span_id != job_span:
                names_of = {JOB_STEP_KEY: node.step_key}
            translator.started(SpanFacts(facts.trace_id, span_id, parent, "", 1, 0, names_of))
            self._rebuilt.add((trace, where, span_id))
            parent = span_id
        return translator.log(facts)

    def _chain(self, trace: str, span_id: int) -> list[tuple[int, Staged]] | None:
        """The span and its ancestors up to its job span; None without one, or through an
        event span (the derivation decides such a context)."""
        chain: list[tuple[int, Staged]] = []
        node_id = signed(span_id)
        while (trace, node_id) in self._nodes and len(chain) < 1000:
            node = self._nodes[(trace, node_id)]
            chain.append((node_id & ID_MASK, node))
            if node.skeleton.kind == JOB:
                break
            node_id = signed(node.skeleton.parent)
        if not chain or chain[-1][1].skeleton.kind != JOB:
            return None
        if any(node.skeleton.kind in (EVENT, NAMING_EVENT) for _, node in chain):
            return None
        return chain


def settled_lines(
    lines: list[tuple[Attempt, LogRecorded]],
    counts: dict[StepCount, int],
    cap: int,
    recorder: StepRecorder,
) -> dict[StepCount, list[int]]:
    """A settled attempt's lines into ``recorder`` while their step stays under ``cap``; the
    ones past it, per step: how many and the latest time (µs), dropped and counted, as live."""
    over: dict[StepCount, list[int]] = {}
    for where, command in lines:
        count = (*where, command.key)
        if counts.get(count, 0) >= cap:
            dropped = over.setdefault(count, [0, 0])
            dropped[0] += 1
            dropped[1] = max(dropped[1], command.time_ns // 1000)
            continue
        counts[count] = counts.get(count, 0) + 1
        recorder.handle(command)
    return over


def direct_lines(
    lines: list[tuple[Attempt, LogRecorded]],
    counts: dict[StepCount, int],
    cap: int,
    recorder: StepRecorder,
    fallback: set[tuple[str, str]],
) -> None:
    """Lines of attempts not settled into ``recorder``, unless a step would pass ``cap``: its
    job joins ``fallback`` (derived instead, which counts what it drops)."""
    for where, command in lines:
        count = (*where, command.key)
        counts[count] = counts.get(count, 0) + 1
        if counts[count] > cap:
            fallback.add(where[:2])
    for where, command in lines:
        if where[:2] not in fallback:
            recorder.handle(command)
