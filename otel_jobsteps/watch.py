"""Door one's facts: the SDK spans the job's hooks queued, read as facts for an interpreter.

A span is read on the writer's side, never on the job's: at its start, at its end, or once as
a whole when its start and end are adjacent in the queue (the usual step). While steps run,
their event counts are polled in turn, at most ``POLL_BUDGET`` steps every ``poll_interval_s``
(all of them at a flush, each at its end: the cost stays flat in the number of steps open),
and the newest progress event is passed on when it changed, so the job's ``add_event`` stays the
SDK's own. What reads the spans (`SpanReader`) hands their facts to the translation on this
thread, or to the writer process (`relay`) when interpretation runs outside the job's
interpreter.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol, cast

from opentelemetry.sdk.trace import ReadableSpan, Span

from .attributes import JOB_EVENT_TYPE, JOB_ID, JOB_STEP_KEY
from .spans import attribute_dict, events_added, newest_progress_event, plain_attributes

__all__ = ["POLL_BUDGET", "LogEmitted", "SpanEnded", "SpanReader", "SpanStarted", "SpanWatch"]

# Running steps looked at per poll: about 1 ms of the writer's time, however many are open.
POLL_BUDGET = 1000


class SpanStarted(NamedTuple):
    """Queued by on_start: a span in a job scope (or one that may open a scope) started."""

    span: Span


class SpanEnded(NamedTuple):
    """Queued by on_end: a span that was queued at its start has ended."""

    span: ReadableSpan


class LogEmitted(NamedTuple):
    """Queued by on_emit: a log record in a job scope (the SDK's object, read by the writer)."""

    record: Any


class SpanReader(Protocol):
    """What reads door one's spans, in queue order, as facts (`facts.span_fields`): a span at
    its start, whole (start and end at once), at its end; a running step's newest progress;
    a log record (`facts.log_fields`)."""

    def started(self, span: ReadableSpan) -> None: ...
    def whole(self, span: ReadableSpan) -> None: ...
    def ended(self, span: ReadableSpan) -> None: ...
    def log(self, record: Any) -> None: ...
    def progress(self, span_id: int, attributes: Mapping[str, Any], time_ns: int = 0) -> bool:
        """Pass on a running step's newest progress (its event's time); False if it was shed
        (read it again)."""
        ...


class _WatchedStep:
    """A live step span polled for new events while it runs."""

    __slots__ = ("added", "newest", "span")

    def __init__(self, span: ReadableSpan) -> None:
        self.span = span
        self.added = 0  # events_added() when last polled
        self.newest: object = None  # the progress event last passed on


def _is_step(attributes: Mapping[str, Any]) -> bool:
    """A span the translation will take for a step (the job span and events never are)."""
    return (
        JOB_STEP_KEY in attributes and JOB_ID not in attributes and JOB_EVENT_TYPE not in attributes
    )


class SpanWatch:
    """Queued live spans -> facts for ``reader``; running steps polled for progress."""

    def __init__(
        self,
        reader: SpanReader,
        *,
        poll_interval_s: float,
        clock: Callable[[], float],
        problem: Callable[[str, object], None],
        max_steps: int,
        poll_budget: int = POLL_BUDGET,
    ) -> None:
        self.reader, self.clock, self._problem = reader, clock, problem
        # Running steps (span id -> watched), at most max_steps, oldest out in O(1).
        self._steps: OrderedDict[int, _WatchedStep] = OrderedDict()
        # The order polls visit them in; ids of steps that ended meanwhile are dropped there.
        self._rotation: deque[int] = deque()
        self._max_steps, self._poll_interval, self._next_poll = max_steps, poll_interval_s, 0.0
        self._poll_budget = poll_budget
        self._deferred: ReadableSpan | None = None  # a start that waits one item for its end
        # True while the writer holds as many operations as it may: progress is shed first.
        self.backlogged: Callable[[], bool] = lambda: False

    def handle(self, item: SpanStarted | SpanEnded | LogEmitted) -> None:
        deferred = self._deferred
        if deferred is not None:
            self._deferred = None
            if type(item) is SpanEnded and item.span.context is deferred.context:
                self.reader.whole(item.span)
                return
            try:
                self._start(deferred)
            except Exception as error:  # noqa: BLE001 - it must not take this item down with it
                self._problem("internal_error", error)
        if type(item) is SpanEnded:
            self._end(item.span)
        elif type(item) is LogEmitted:  # after the start held back: its span may be that one
            self.reader.log(item.record)
        else:
            span = cast(SpanStarted, item).span
            if span.end_time is not None:
                # Ended already: its end is most likely the next item; the two read as one.
                self._deferred = span
            else:
                self._start(span)

    def settle(self) -> None:
        """Pass on a start held back to meet its end: whatever comes next must see it."""
        deferred = self._deferred
        if deferred is not None:
            self._deferred = None
            self._start(deferred)

    def _start(self, span: ReadableSpan) -> None:
        self.reader.started(span)
        if _is_step(attribute_dict(span)):
            steps = self._steps
            if not steps:
                self._next_poll = self.clock() + self._poll_interval
            span_id = span.context.span_id
            steps[span_id] = _WatchedStep(span)
            rotation = self._rotation
            rotation.append(span_id)
            if len(steps) > self._max_steps:  # the translation forgets the oldest too
                steps.popitem(last=False)
            if len(rotation) > 2 * len(steps) + self._poll_budget:  # mostly ended: rebuilt
                self._rotation = deque(steps)

    def _end(self, span: ReadableSpan) -> None:
        watched = self._steps.pop(span.context.span_id, None)
        if watched is not None and watched.newest is not None:
            # Polled before: events since then ride with the close. Never polled: the
            # translation takes the newest progress from the ended span's events.
            self._poll(watched, span)
        self.reader.ended(span)

    def _poll(self, watched: _WatchedStep, span: ReadableSpan) -> None:
        added = events_added(span)
        if added == watched.added:
            return
        event = newest_progress_event(span)
        if event is None or event is watched.newest:
            watched.added = added  # only exceptions were added
            return
        attributes = plain_attributes(event.attributes)
        if self.reader.progress(span.context.span_id, attributes, event.timestamp or 0):
            watched.added, watched.newest = added, event

    def offer_progress_again(self) -> None:
        """A new reader: each running step's newest progress is passed on at its next visit."""
        for watched in self._steps.values():
            watched.added, watched.newest = 0, None

    def next_poll(self) -> float | None:
        """When running steps are next looked at; None while no step runs."""
        return self._next_poll if self._steps else None

    def poll_due(self, now: float) -> None:
        """Look at the next running steps in turn if their time has come."""
        self.settle()
        if self._steps and now >= self._next_poll:
            self._next_poll = now + self._poll_interval
            self._visit(self._poll_budget)

    def poll_all(self) -> None:
        """Every running step's newest progress, now (a flush must see all of it)."""
        self.settle()
        if self._steps:
            self._visit(len(self._rotation))

    def _visit(self, count: int) -> None:
        """The next ``count`` running steps in turn: polled, or while the writer is backlogged,
        their new progress counted as shed (read again at the next visit)."""
        steps, rotation, backlogged = self._steps, self._rotation, self.backlogged()
        shed = False
        for _ in range(min(count, len(rotation))):
            span_id = rotation.popleft()
            watched = steps.get(span_id)
            if watched is None:
                continue  # ended or forgotten since
            rotation.append(span_id)
            if backlogged:
                shed = shed or events_added(watched.span) != watched.added
            else:
                self._poll(watched, watched.span)
        if shed:
            self._problem("dropped_ProgressReported", "backlog: progress not read")
