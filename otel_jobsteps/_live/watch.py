"""Door one's facts: the items the hooks queued, read as fields on the writer's side.

A span is read at its start (saying whether it had ended by then) and at its end; running steps
are polled in turn (at most ``POLL_BUDGET`` a poll) for their newest progress. The reader tells
them to the one interpreter (`_core.interpreter`), here or in the writer process."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, NamedTuple, Protocol

from opentelemetry.sdk.trace import ReadableSpan, Span

from .._core.events import events_read, plain_attributes
from .._core.facts import SpanEvent, SpanFacts
from .._core.translate import is_step
from .fields import log_fields, span_fields
from .spans import ended_events, events_added, newest_progress_event

__all__ = [
    "POLL_BUDGET",
    "PROGRESS_POLL_S",
    "LogEmitted",
    "SpanEnded",
    "SpanReader",
    "SpanStarted",
    "SpanWatch",
    "ended_facts",
    "ended_fields",
    "plain_dict",
    "progress_poll_s",
]

# Running steps looked at per poll: about 1 ms of the writer's time, however many are open.
POLL_BUDGET = 1000
# A running step's events are looked at this often: the first progress is written this soon.
PROGRESS_POLL_S = 0.05
MIN_PROGRESS_POLL_S = 0.005  # with no debounce at all


def progress_poll_s(debounce_ms: float) -> float:
    """How often running steps are polled: never slower than the debounce window."""
    return min(PROGRESS_POLL_S, debounce_ms / 1000) or MIN_PROGRESS_POLL_S


class SpanStarted:
    """Queued by on_start: a span in a job scope (or one that may open a scope) started.

    on_end sets ``fields`` and drops ``span``: the queue keeps no SDK object past a span's end.
    A job span's attributes are copied at its start (``attributes``): the job's identity is read
    from them, whatever the job sets later (`_core.translate.SpanTranslator`).
    """

    __slots__ = ("attributes", "fields", "span")

    def __init__(self, span: Span | None, attributes: dict[str, Any] | None = None) -> None:
        self.span: Span | None = span
        self.fields: tuple[Any, ...] = ()  # the ended fields, set before ``span`` is dropped
        self.attributes = attributes  # a job span's attributes at its start, else None


class SpanEnded(NamedTuple):
    """Queued by on_end: the ended fields (`ended_fields`) of a span queued at its start."""

    fields: tuple[Any, ...]


def plain_dict(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """The attributes as a dict (the SDK's own, not copied, when it is one)."""
    plain = plain_attributes(attributes)
    return plain if type(plain) is dict else dict(plain)


def ended_fields(span: ReadableSpan) -> tuple[Any, ...]:
    """An ended span's `SpanFacts` fields as plain values, its events (those the translation
    reads) as (name, time, attributes): untracked by the collector, unlike the SDK's objects."""
    events = tuple(
        [
            (event.name, event.timestamp, plain_dict(event.attributes))
            for event in events_read(ended_events(span))
        ]
    )
    return span_fields(span, ended=True, events=events)


# An event's plain (name, time, attributes) as a `SpanEvent`, without its constructor's call.
_span_event = partial(tuple.__new__, SpanEvent)


def ended_facts(fields: tuple[Any, ...]) -> SpanFacts:
    """The facts of an ended span's fields (`ended_fields`: plain events)."""
    facts = SpanFacts(*fields)
    facts.events = [*map(_span_event, facts.events)]
    return facts


def _start_fields(
    fields: tuple[Any, ...], attributes: Mapping[str, Any] | None = None
) -> tuple[Any, ...]:
    """The fields as at the span's start (what on_start could know) of ``fields``, with the
    attributes copied at its start if any (a job span's)."""
    return (  # indexed, not sliced and unpacked: a third fewer instructions, once a span
        fields[0], fields[1], fields[2], fields[3], fields[4], 0,
        fields[6] if attributes is None else attributes, (), False, None, fields[10],
    )  # fmt: skip


class LogEmitted(NamedTuple):
    """Queued by on_emit: a log record in a job scope (the SDK's object, read by the writer)."""

    record: Any


class SpanReader(Protocol):
    """What reads door one's items, in queue order, as fields (`_live.fields.span_fields`): a
    span's start (``ended``: it had ended when read; ``whole``: its start values are its end's),
    its end; a running step's newest progress; a log record (`_live.fields.log_fields`)."""

    def started(self, fields: tuple[Any, ...], ended: bool, whole: bool) -> None: ...
    def ended(self, fields: tuple[Any, ...]) -> None: ...
    def log(self, fields: tuple[Any, ...]) -> None: ...
    def progress(
        self, trace_id: int, span_id: int, attributes: Mapping[str, Any], time_ns: int = 0
    ) -> bool:
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
        # True while the writer holds as many operations as it may: progress is shed first.
        self.backlogged: Callable[[], bool] = lambda: False

    def handle(self, item: SpanStarted | SpanEnded | LogEmitted) -> None:
        if isinstance(item, SpanEnded):
            self._end(item.fields)
            return
        if isinstance(item, LogEmitted):
            self.reader.log(log_fields(item.record))
            return
        span = item.span  # read before ``fields``: on_end sets those first, then drops the span
        if span is None or span.end_time is not None:
            # Ended already: its end is most likely the next item (the two may be one reading).
            fields = item.fields if span is None else span_fields(span, ended=False)
            start = _start_fields(fields, item.attributes)
            self.reader.started(start, True, item.attributes is None)
        else:
            self._start(span, item.attributes)

    def _start(self, span: ReadableSpan, attributes: Mapping[str, Any] | None) -> None:
        fields = span_fields(span, ended=False)
        if attributes is not None:
            fields = _start_fields(fields, attributes)
        self.reader.started(fields, False, False)
        if is_step(fields[6]):
            steps = self._steps
            if not steps:
                self._next_poll = self.clock() + self._poll_interval
            span_id = fields[1]
            steps[span_id] = _WatchedStep(span)
            rotation = self._rotation
            rotation.append(span_id)
            if len(steps) > self._max_steps:  # the translation forgets the oldest too
                steps.popitem(last=False)
            if len(rotation) > 2 * len(steps) + self._poll_budget:  # mostly ended: rebuilt
                self._rotation = deque(steps)

    def _end(self, fields: tuple[Any, ...]) -> None:
        watched = self._steps.pop(fields[1], None)
        if watched is not None and watched.newest is not None:
            # Polled before: events since then ride with the close. Never polled: the
            # translation takes the newest progress from the ended span's events.
            self._poll(watched, watched.span)
        self.reader.ended(fields)

    def _poll(self, watched: _WatchedStep, span: ReadableSpan) -> None:
        added = events_added(span)
        if added == watched.added:
            return
        event = newest_progress_event(span)
        if event is None or event is watched.newest:
            watched.added = added  # only exceptions were added
            return
        attributes = plain_attributes(event.attributes)
        context = span.context
        if self.reader.progress(
            context.trace_id, context.span_id, attributes, event.timestamp or 0
        ):
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
        if self._steps and now >= self._next_poll:
            self._next_poll = now + self._poll_interval
            self._visit(self._poll_budget)

    def poll_all(self) -> None:
        """Every running step's newest progress, now (a flush must see all of it): the steps
        themselves, not the rotation, which also holds the ids of the steps ended since."""
        if self._steps:
            self._look_at(list(self._steps.values()))

    def _visit(self, count: int) -> None:
        """The next ``count`` running steps in turn."""
        steps, rotation = self._steps, self._rotation
        visited: list[_WatchedStep] = []
        for _ in range(min(count, len(rotation))):
            span_id = rotation.popleft()
            watched = steps.get(span_id)
            if watched is None:
                continue  # ended or forgotten since
            rotation.append(span_id)
            visited.append(watched)
        self._look_at(visited)

    def _look_at(self, visited: list[_WatchedStep]) -> None:
        """Poll ``visited``, or while the writer is backlogged, count their new progress as
        shed (read again at the next visit)."""
        if not self.backlogged():
            for watched in visited:
                self._poll(watched, watched.span)
        elif any(events_added(watched.span) != watched.added for watched in visited):
            self._problem("dropped_ProgressReported", "backlog: progress not read")
