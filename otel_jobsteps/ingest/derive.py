"""All received spans of one trace -> the recorder's commands, as if they had been seen live.

The order rule: every span starts and ends once (a start marker only starts it); a span starts
after its parent started, and ends after it started and after each of its children started and
ended. Among what may come next, the earliest time goes first; at one instant, ends of spans that
began earlier come first, then starts (outer before inner), then ends of spans that lasted no
time (inner before outer); the span id breaks what is left. So the job span's start comes
first, its steps in time order, and its end last, whatever order the spans arrived in.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Sequence
from operator import itemgetter
from typing import NamedTuple

from ..attributes import JOB_EVENT_TYPE, JOB_ID, JOB_STEP_KEY
from ..facts import SpanFacts
from ..recorder import Command, EventRecorded
from ..translate import SpanTranslator
from .mapping import JobMapping, map_trace

__all__ = ["Derived", "trace_commands"]


class Derived(NamedTuple):
    """One trace's commands, and whether it is whole: no span still waits for its ended copy
    or for the job span it belongs to (a trace that is not whole is settled later)."""

    commands: list[Command]
    whole: bool


def trace_commands(
    spans: Iterable[SpanFacts],
    translator: SpanTranslator,
    *,
    mappings: Sequence[JobMapping] = (),
    derived_before: Collection[int] = (),
) -> Derived:
    """The commands of one trace's spans in span order (see the module docstring).

    ``derived_before`` are span ids an earlier derivation already turned into rows: an ordinary
    event outside any job span is written once, as its row has no trace to be replaced by.
    """
    latest: dict[int, SpanFacts] = {}
    for span in spans:
        known = latest.get(span.span_id)
        # The first ended copy wins (staging keeps the first copy too), and over a marker.
        if known is None or (span.end_ns and not known.end_ns):
            latest[span.span_id] = span
    nodes = {span.span_id: span for span in map_trace(list(latest.values()), mappings)}
    commands: list[Command] = []
    for is_start, span in _in_span_order(nodes):
        if not is_start:
            if JOB_EVENT_TYPE not in span.attributes:  # an event span is complete at its start
                commands.extend(translator.ended(span))
            continue
        started = translator.started(span)
        if span.span_id in derived_before and JOB_EVENT_TYPE in span.attributes:
            started = [
                c for c in started if not (isinstance(c, EventRecorded) and not c.scope.trace_id)
            ]
        commands.extend(started)
    return Derived(commands, _whole(nodes))


def _whole(nodes: dict[int, SpanFacts]) -> bool:
    """Whether nothing of the trace is still to come: it has a job span, no start marker waits
    for its ended copy, and every step or event span reaches a job span through parents
    received. A trace without a job span waits for one (a producer's span, a plain child of a
    long step: the job's spans come later), as long as the open settle time."""
    if any(not span.end_ns for span in nodes.values()):
        return False
    if not any(JOB_ID in span.attributes for span in nodes.values()):
        return False
    return not any(
        _waits_for_a_parent(span, nodes)
        for span in nodes.values()
        if JOB_STEP_KEY in span.attributes or JOB_EVENT_TYPE in span.attributes
    )


def _waits_for_a_parent(span: SpanFacts, nodes: dict[int, SpanFacts]) -> bool:
    seen: set[int] = set()
    node = span
    while JOB_ID not in node.attributes:
        seen.add(node.span_id)
        parent_id = node.parent_span_id
        if not parent_id or parent_id in seen:
            return False  # outside any job (as the processor sees it), or a parent cycle
        parent = nodes.get(parent_id)
        if parent is None:
            return True
        node = parent
    return False


def _key(span: SpanFacts, level: int, is_start: bool) -> tuple[int, int, int, int]:
    """Sort key of a span's start or end (see the module docstring)."""
    if is_start:
        return (span.start_ns, 1, level, span.span_id)
    return (span.end_ns, 0 if span.end_ns > span.start_ns else 2, -level, span.span_id)


def _in_span_order(nodes: dict[int, SpanFacts]) -> list[tuple[bool, SpanFacts]]:
    children: dict[int, list[int]] = {}
    for span_id, span in nodes.items():
        if span.parent_span_id in nodes and span.parent_span_id != span_id:
            children.setdefault(span.parent_span_id, []).append(span_id)
    depth = _depths(nodes, children)
    # Per ended span, the events it waits for besides its own start: its children's starts and
    # ends.
    waiting = {
        span_id: sum(1 + bool(nodes[k].end_ns) for k in children.get(span_id, ()))
        for span_id, span in nodes.items()
        if span.end_ns
    }
    # Usually the plain time order already keeps every rule (clocks agree within a trace):
    # then it is the answer, and the ordering below would give the same.
    events = [(_key(span, depth[i], True), True, span) for i, span in nodes.items()]
    events += [
        (_key(span, depth[i], False), False, span) for i, span in nodes.items() if span.end_ns
    ]
    events.sort(key=itemgetter(0))
    if _keeps_the_rules(events, nodes, dict(waiting)):
        return [(is_start, span) for _, is_start, span in events]
    return _ordered_by_rules(nodes, children, depth, waiting)


def _keeps_the_rules(
    events: list[tuple[tuple[int, int, int, int], bool, SpanFacts]],
    nodes: dict[int, SpanFacts],
    waiting: dict[int, int],
) -> bool:
    started: set[int] = set()
    for _, is_start, span in events:
        span_id, parent = span.span_id, span.parent_span_id
        in_trace = parent in nodes and parent != span_id
        if is_start:
            if in_trace and parent not in started:
                return False
            started.add(span_id)
        elif waiting[span_id]:
            return False
        if in_trace and parent in waiting:
            waiting[parent] -= 1
    return True


def _ordered_by_rules(
    nodes: dict[int, SpanFacts],
    children: dict[int, list[int]],
    depth: dict[int, int],
    waiting: dict[int, int],
) -> list[tuple[bool, SpanFacts]]:
    """The order rule as a scheduler: of the events whose prerequisites are done, the least."""
    # An end also waits for its own start.
    pending = {span_id: count + 1 for span_id, count in waiting.items()}
    ready: list[tuple[tuple[int, int, int, int], int, bool]] = []

    def push(span_id: int, is_start: bool) -> None:
        heapq.heappush(ready, (_key(nodes[span_id], depth[span_id], is_start), span_id, is_start))

    def one_done(span_id: int) -> None:
        if span_id in pending:
            pending[span_id] -= 1
            if not pending[span_id]:
                push(span_id, False)

    for span_id, span in nodes.items():
        if span.parent_span_id not in nodes or span.parent_span_id == span_id:
            push(span_id, True)
    order: list[tuple[bool, SpanFacts]] = []
    while ready:
        _, span_id, is_start = heapq.heappop(ready)
        span = nodes[span_id]
        order.append((is_start, span))
        if is_start:
            for child in children.get(span_id, ()):
                push(child, True)
            one_done(span_id)
        if span.parent_span_id in nodes and span.parent_span_id != span_id:
            one_done(span.parent_span_id)
    return order


def _depths(nodes: dict[int, SpanFacts], children: dict[int, list[int]]) -> dict[int, int]:
    """Distance from the trace's outermost received span (spans in a parent cycle never start)."""
    depth: dict[int, int] = {}
    stack = [
        (i, 0) for i, s in nodes.items() if s.parent_span_id not in nodes or s.parent_span_id == i
    ]
    while stack:
        span_id, level = stack.pop()
        depth[span_id] = level
        stack.extend((child, level + 1) for child in children.get(span_id, ()))
    for span_id in nodes:
        depth.setdefault(span_id, 0)
    return depth
