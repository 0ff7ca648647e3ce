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

from ..attributes import JOB_EVENT_TYPE
from ..facts import SpanFacts
from ..recorder import Command, EventRecorded
from ..translate import SpanTranslator
from .mapping import JobMapping, map_trace

__all__ = ["trace_commands"]

_START = 1


def trace_commands(
    spans: Iterable[SpanFacts],
    translator: SpanTranslator,
    *,
    mappings: Sequence[JobMapping] = (),
    derived_before: Collection[int] = (),
) -> list[Command]:
    """The commands of one trace's spans in span order (see the module docstring).

    ``derived_before`` are span ids an earlier derivation already turned into rows: an ordinary
    event outside any job span is written once, as its row has no trace to be replaced by.
    """
    latest: dict[int, SpanFacts] = {}
    for span in spans:
        if span.end_ns or span.span_id not in latest:  # the ended span wins over its marker
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
    return commands


def _in_span_order(nodes: dict[int, SpanFacts]) -> list[tuple[bool, SpanFacts]]:
    children: dict[int, list[int]] = {}
    for span_id, span in nodes.items():
        if span.parent_span_id in nodes and span.parent_span_id != span_id:
            children.setdefault(span.parent_span_id, []).append(span_id)
    depth = _depths(nodes, children)
    # Events still waiting for others: a start for its parent's start, an end for its own start
    # and its children's starts and ends.
    waiting: dict[tuple[int, int], int] = {}
    for span_id, span in nodes.items():
        kids = children.get(span_id, ())
        if span.end_ns:
            waiting[(span_id, 0)] = 1 + sum(1 + bool(nodes[k].end_ns) for k in kids)
    ready: list[tuple[tuple[int, int, int, int], int, int]] = []

    def push(span_id: int, phase: int) -> None:
        span = nodes[span_id]
        level = depth[span_id]
        if phase == _START:
            key = (span.start_ns, 1, level, span_id)
        else:
            key = (span.end_ns, 0 if span.end_ns > span.start_ns else 2, -level, span_id)
        heapq.heappush(ready, (key, span_id, phase))

    def done(span_id: int) -> None:
        parent = nodes[span_id].parent_span_id
        if parent in nodes and (parent, 0) in waiting and parent != span_id:
            waiting[(parent, 0)] -= 1
            if not waiting[(parent, 0)]:
                push(parent, 0)

    for span_id, span in nodes.items():
        if span.parent_span_id not in nodes or span.parent_span_id == span_id:
            push(span_id, _START)
    order: list[tuple[bool, SpanFacts]] = []
    while ready:
        _, span_id, phase = heapq.heappop(ready)
        order.append((phase == _START, nodes[span_id]))
        if phase == _START:
            for child in children.get(span_id, ()):
                push(child, _START)
            if (span_id, 0) in waiting:
                waiting[(span_id, 0)] -= 1
                if not waiting[(span_id, 0)]:
                    push(span_id, 0)
        done(span_id)
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
