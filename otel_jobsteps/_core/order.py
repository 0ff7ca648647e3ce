"""The order the processor would have seen a job's spans and log records in, live.

The order rule: every span starts and ends once (a start marker only starts it); a span starts
after its parent started; its end comes at its end time, so a step ending after its job span is
closed by the job's end, as live. Where a child started before its parent the clocks disagree
(spans of one trace from two processes): that parent's end then also waits for its children's
ends. Among what may come next, the earliest time goes first. The tie rule, at one instant:
ends of spans that began earlier come first (inner before outer), then starts, outer before
inner; of spans starting together, those that lasted no time first, each ending right after its
own descendants of that instant; spans starting as their parent ends start right after that
instant's ends, before any other start then. So a step ending in the tick the next one starts
is closed by its own end, with its status and error, at any clock resolution; span ids break
what is left. Most jobs need only time: every instant their own, each span after its parent.
Node's SDK starts spans on the wall clock's whole millisecond (Date.now()) and ends them that
much plus their precise duration, so a step's end may read later than the next one's start: a
step starting on a whole millisecond waits for the end, within that millisecond, of a sibling
step that started earlier, or started in the same millisecond and ended first.

Log records join that order at their time, as live: after their span's start (right after it
if earlier), before its end (right before it if later); records at one place go by time, then
by their place in their request, then by span and key.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from itertools import accumulate
from operator import itemgetter
from typing import Any

from ..attributes import JOB_STEP_KEY
from .facts import LogFacts, SpanFacts

__all__ = ["in_span_order", "latest_copies", "scheduled_order", "with_logs"]

_Node = tuple[int, int]  # trace id, span id
_Key = tuple[int, int, tuple[Any, ...]]
_START_TICK_NS = 1_000_000  # a start on a whole millisecond stands for any time within it


def latest_copies(spans: Iterable[SpanFacts]) -> dict[_Node, SpanFacts]:
    """One fact per span: the first ended copy (staging keeps the first copy too), else the
    marker."""
    latest: dict[_Node, SpanFacts] = {}
    for span in spans:
        node = (span.trace_id, span.span_id)
        known = latest.get(node)
        if known is None or (span.end_ns and not known.end_ns):
            latest[node] = span
    return latest


def with_logs(
    order: list[tuple[bool, SpanFacts]], logs: Iterable[tuple[LogFacts, Any]]
) -> list[tuple[bool, SpanFacts | LogFacts]]:
    """``order`` with each record placed at its time within its span's start and end (a
    record whose span is not in ``order`` is outside these spans: left out)."""
    logs = list(logs)
    if not logs:
        return list(order)
    starts: dict[_Node, int] = {}
    ends: dict[_Node, int] = {}
    for index, (is_start, span) in enumerate(order):
        (starts if is_start else ends)[(span.trace_id, span.span_id)] = index
    # The latest time reached by each place (the order's times may step back: tie rules).
    reached = list(accumulate((s.start_ns if st else s.end_ns for st, s in order), max))
    slots: dict[int, list[tuple[Any, LogFacts]]] = {}
    for record, tie in logs:
        node = (record.trace_id, record.span_id)
        start = starts.get(node)
        if start is None:
            continue
        end = ends.get(node, len(order))
        at = bisect_right(reached, record.time_ns, start + 1, end)  # before the first later
        slots.setdefault(at, []).append(((record.time_ns, tie, record.span_id), record))
    if not slots:
        return list(order)
    merged: list[tuple[bool, SpanFacts | LogFacts]] = []
    for index in range(len(order) + 1):
        for _, record in sorted(slots.get(index, ()), key=lambda item: item[0]):
            merged.append((False, record))
        if index < len(order):
            merged.append(order[index])
    return merged


def _parent(nodes: dict[_Node, SpanFacts], node: _Node) -> _Node | None:
    parent = (node[0], nodes[node].parent_span_id)
    return parent if parent[1] and parent != node and parent in nodes else None


def in_span_order(nodes: dict[_Node, SpanFacts]) -> list[tuple[bool, SpanFacts]]:
    """The spans' starts and ends in the order rule's order."""
    order = _in_time_order(nodes)
    return scheduled_order(nodes) if order is None else order


def _in_time_order(nodes: dict[_Node, SpanFacts]) -> list[tuple[bool, SpanFacts]] | None:
    """The order when no rule beyond time has a say (most jobs): every start and end at its
    own instant, each span starting after its parent, none on a whole millisecond. Each
    event's prerequisites are then earlier, so the scheduler would take them by time; None
    otherwise."""
    events: list[tuple[int, bool, SpanFacts]] = []
    for (trace, _), span in nodes.items():
        start = span.start_ns
        parent = nodes.get((trace, span.parent_span_id))
        if (parent is not None and parent.start_ns >= start) or not start % _START_TICK_NS:
            return None
        events.append((start, True, span))
        if span.end_ns:
            events.append((span.end_ns, False, span))
    if len({event[0] for event in events}) < len(events):
        return None
    events.sort(key=itemgetter(0))
    return [(is_start, span) for _, is_start, span in events]


def scheduled_order(nodes: dict[_Node, SpanFacts]) -> list[tuple[bool, SpanFacts]]:
    """The order rule as a scheduler: of the events whose prerequisites are done, the least."""
    children: dict[_Node, list[_Node]] = {}
    roots = []
    for node in nodes:
        parent = _parent(nodes, node)
        if parent is None:
            roots.append(node)
        else:
            children.setdefault(parent, []).append(node)
    paths = _paths(nodes, children, roots)
    # An end waits for its own start, for the children starting at its instant (and the ends
    # of those lasting no time), and where a child started before it for every child's end.
    pending = {
        node: 1
        + sum(
            (nodes[child].start_ns == span.end_ns) + _end_waits(nodes, node, child)
            for child in children.get(node, ())
        )
        for node, span in nodes.items()
        if span.end_ns
    }
    ready: list[tuple[_Key, bool, _Node]] = []
    releases = _start_waits(nodes, children)
    blocked: dict[_Node, int] = {}
    for waiting in releases.values():
        for node in waiting:
            blocked[node] = blocked.get(node, 0) + 1

    def in_ending(node: _Node) -> _Key | None:
        """The key of a span starting as its parent ends: after that instant's ends, before
        its other starts (the parent's end waits for it: no other start may pass it)."""
        parent, span = _parent(nodes, node), nodes[node]
        if parent is None or nodes[parent].end_ns != span.start_ns:
            return None
        return (span.start_ns, 1, (-len(paths[node][1]), *node))

    def push_start(node: _Node) -> None:
        key = in_ending(node) or (nodes[node].start_ns, 2, paths[node][0])
        heapq.heappush(ready, (key, True, node))

    def push_end(node: _Node) -> None:
        span = nodes[node]
        if span.end_ns > span.start_ns:
            key: _Key = (span.end_ns, 0, (-len(paths[node][1]), *node))
        else:
            key = in_ending(node) or (span.start_ns, 2, (*paths[node][0], (2, 0, 0)))
        heapq.heappush(ready, (key, False, node))

    def one_done(node: _Node) -> None:
        pending[node] -= 1
        if not pending[node]:
            push_end(node)

    for node in roots:
        push_start(node)
    order: list[tuple[bool, SpanFacts]] = []
    while ready:
        _, is_start, node = heapq.heappop(ready)
        span = nodes[node]
        order.append((is_start, span))
        if is_start:
            for child in children.get(node, ()):
                if not blocked.get(child):
                    push_start(child)
            if node in pending:
                one_done(node)
        else:
            for later in releases.get(node, ()):  # siblings: their parent has started
                blocked[later] -= 1
                if not blocked[later]:
                    push_start(later)
        parent = _parent(nodes, node)
        if parent is None or parent not in pending:
            continue
        if (
            _end_waits(nodes, parent, node)
            if not is_start
            else span.start_ns == nodes[parent].end_ns
        ):
            one_done(parent)
    return order


def _start_waits(
    nodes: dict[_Node, SpanFacts], children: dict[_Node, list[_Node]]
) -> dict[_Node, list[_Node]]:
    """Per step, the sibling steps whose start waits for its end: each starts on a whole
    millisecond this step ended within, and this step started earlier, or then and ended
    first (Node's millisecond starts)."""
    waits: dict[_Node, list[_Node]] = {}
    for siblings in children.values():
        steps = [node for node in siblings if JOB_STEP_KEY in nodes[node].attributes]
        ended = sorted((nodes[node].end_ns, node) for node in steps if nodes[node].end_ns)
        ends = [end for end, _ in ended]
        for node in steps:
            span = nodes[node]
            if not ended or span.start_ns % _START_TICK_NS:
                continue
            first = bisect_right(ends, span.start_ns)
            last = bisect_left(ends, span.start_ns + _START_TICK_NS)
            for end, earlier in ended[first:last]:
                began = nodes[earlier].start_ns
                if began < span.start_ns or (
                    began == span.start_ns and (not span.end_ns or end < span.end_ns)
                ):
                    waits.setdefault(earlier, []).append(node)
    return waits


def _end_waits(nodes: dict[_Node, SpanFacts], parent: _Node, child: _Node) -> bool:
    """Whether the parent's end waits for this child's end: the child lasts no time and starts
    as the parent ends, or it started before the parent (the clocks disagree)."""
    span, outer = nodes[child], nodes[parent]
    if not span.end_ns:
        return False
    return span.start_ns < outer.start_ns or (span.end_ns == span.start_ns == outer.end_ns)


def _paths(
    nodes: dict[_Node, SpanFacts], children: dict[_Node, list[_Node]], roots: list[_Node]
) -> dict[_Node, tuple[tuple[Any, ...], tuple[_Node, ...]]]:
    """Per span reachable from a root: its tie path (the ancestors starting at its instant and
    itself, each as (lasts no time ? 0 : 1, trace, span id)) and its ancestors (depth)."""
    found: dict[_Node, tuple[tuple[Any, ...], tuple[_Node, ...]]] = {}
    stack: list[tuple[_Node, tuple[Any, ...], tuple[_Node, ...]]] = [
        (node, (), ()) for node in roots
    ]
    while stack:
        node, inherited, ancestors = stack.pop()
        span = nodes[node]
        step = (0 if span.end_ns == span.start_ns else 1, *node)
        path = (*inherited, step)
        found[node] = (path, ancestors)
        for child in children.get(node, ()):
            same_instant = nodes[child].start_ns == span.start_ns
            stack.append((child, path if same_instant else (), (*ancestors, node)))
    return found
