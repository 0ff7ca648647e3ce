"""The one interpreter both doors call: facts in the order they happened -> the translation ->
the commands a sink (the recorder) applies.

The processor's writer feeds it facts as they come off its queue; `collect` feeds it the facts
of a job, staged and new, in the order the processor would have seen them (`_core.order`). Here
lives what both doors read facts by: whole when adjacent (`_core.adjacent`), the translation of
each trace (`_core.translate`), and where the commands go. No I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any, Protocol

from .. import attributes as attr
from .adjacent import Adjacency
from .commands import Command
from .dialects import Dialects
from .facts import LogFacts, SpanFacts
from .translate import Problem, SpanTranslator

__all__ = [
    "DEFAULT_MAX_HELD_UNITS",
    "CommandSink",
    "Interpreter",
    "OneTranslator",
    "PerTrace",
    "Translators",
]

DEFAULT_MAX_HELD_UNITS = 10_000  # dialects' jobs waiting for their end; the oldest is dropped

_Node = tuple[int, int]  # trace id, span id


class CommandSink(Protocol):
    """Where the interpreter's commands go: the recorder, or what notes them on their way."""

    def handle(self, command: Command, /) -> None: ...
    def resume(self, command: Command, /) -> None: ...


class Translators(Protocol):
    """The translation of each trace: span ids are unique within a trace only."""

    def of(self, trace_id: int) -> SpanTranslator:
        """The trace's translation, made if it has none yet."""
        ...

    def find(self, trace_id: int) -> SpanTranslator | None:
        """The trace's translation if it has one (a log record never opens a trace)."""
        ...


class OneTranslator:
    """One translation for every trace: the processor's, whose span ids come from one process
    (random 64-bit ids) and whose open spans are bounded as one."""

    __slots__ = ("translator",)

    def __init__(self, translator: SpanTranslator) -> None:
        self.translator = translator

    def of(self, trace_id: int) -> SpanTranslator:
        return self.translator

    def find(self, trace_id: int) -> SpanTranslator | None:
        return self.translator


class PerTrace:
    """A translation per trace: collect's, where spans of many processes meet (``held``: the
    translations a derivation state kept, by trace)."""

    __slots__ = ("held", "make")

    def __init__(
        self,
        make: Callable[[], SpanTranslator],
        held: dict[int, SpanTranslator] | None = None,
    ) -> None:
        self.make = make
        self.held = {} if held is None else held

    def of(self, trace_id: int) -> SpanTranslator:
        found = self.held.get(trace_id)
        if found is None:
            found = self.held[trace_id] = self.make()
        return found

    def find(self, trace_id: int) -> SpanTranslator | None:
        return self.held.get(trace_id)


class _Unit:
    """A span a dialect may make a job, held with everything in it until it ends: its meaning
    is known only then (`_core.dialects`). ``told``: its facts in the order they came."""

    __slots__ = ("members", "root", "told")

    def __init__(self, root: SpanFacts) -> None:
        self.root = (root.trace_id, root.span_id)
        self.members: set[_Node] = {self.root}
        self.told: list[SpanFacts | LogFacts | tuple[SpanFacts]] = [root]  # (end,): an end


class Interpreter:
    """Facts in order -> commands for ``sink``. A start read after its span ended is held until
    the next fact: if that is its own end, the two are told as one (a step: one `StepRan`).

    With ``dialects``, a span with no job of its own outside any job scope that one of them may
    make a job is held, with its descendants and their log records, until it ends; then the
    dialect gives the spans their meaning and they are told in the order they came, each start
    as its span ended (what `collect` reads of a span). At most ``max_held_units`` wait (the
    oldest dropped and counted as ``dropped_unit``)."""

    __slots__ = (
        "_adjacency",
        "_dialects",
        "_max_units",
        "_problem",
        "_roots",
        "_units",
        "_verbs",
        "sink",
        "translators",
    )

    def __init__(
        self,
        translators: Translators,
        sink: CommandSink,
        *,
        dialects: Dialects | None = None,
        problem: Problem | None = None,
        max_held_units: int = DEFAULT_MAX_HELD_UNITS,
    ) -> None:
        self.translators = translators
        self.sink = sink
        self._verbs = _Verbs(translators, sink)
        self._adjacency: Adjacency[SpanFacts] = Adjacency(self._verbs, _span_of)
        self._dialects = dialects or None  # none selected: no test per span
        self._problem = problem
        self._max_units = max_held_units
        # Every member of a held unit -> its unit; the units by root, oldest first.
        self._units: dict[_Node, _Unit] = {}
        self._roots: OrderedDict[_Node, _Unit] = OrderedDict()

    def start(self, span: SpanFacts, *, ended: bool = False, whole: bool = True) -> None:
        """A span's start. ``ended``: read after the span ended, so its end may come next;
        ``whole``: those two are one reading (not when the start carries values of its own, a
        job span's attributes as it started)."""
        if (self._units or self._dialects is not None) and self._held(span):
            return
        adjacency = self._adjacency
        if adjacency.held is not None:
            adjacency.release()
        if ended:
            adjacency.hold(span, whole=whole)
        else:
            self._verbs.started(span)

    def end(self, span: SpanFacts) -> None:
        """A span's end: told with its start when that was held for it, else alone."""
        if self._units:
            node = (span.trace_id, span.span_id)
            unit = self._units.get(node)
            if unit is not None:
                unit.told.append((span,))
                if node == unit.root:
                    self._tell_unit(unit)
                return
        adjacency = self._adjacency
        if adjacency.held is not None:
            if adjacency.adjacent(span):
                return
            adjacency.release()
        self._verbs.ended(span)

    def log(self, record: LogFacts) -> None:
        """A log record: a step's progress, a log line, or nothing outside any job scope."""
        if self._units:
            unit = self._units.get((record.trace_id, record.span_id))
            if unit is not None:
                unit.told.append(record)
                return
        self.settle()  # the start held may be its span's
        translator = self.translators.find(record.trace_id)
        if translator is not None:
            self._verbs.tell(translator.log(record))

    def progress(
        self, trace_id: int, span_id: int, attributes: Mapping[str, Any], time_ns: int = 0
    ) -> bool:
        """A running step's newest progress event, seen while it runs (the processor's polls);
        True if it was recorded (a held unit's steps are read at their end)."""
        if self._units and (trace_id, span_id) in self._units:
            return False
        self.settle()
        translator = self.translators.find(trace_id)
        command = None if translator is None else translator.progress(span_id, attributes, time_ns)
        if command is None:
            return False
        self.sink.handle(command)
        return True

    def resume(self, span: SpanFacts) -> None:
        """A span a dead writer process had seen start: its rows may exist already."""
        self.settle()
        for command in self.translators.of(span.trace_id).started(span):
            self.sink.resume(command)

    def settle(self) -> None:
        """Tell a start held back to meet its end: whatever comes next must see it."""
        if self._adjacency.held is not None:
            self._adjacency.release()

    # -- dialects' units ------------------------------------------------------------------------

    def _held(self, span: SpanFacts) -> bool:
        """Hold ``span`` in a unit: inside one, or opening one; False if it is told now."""
        attributes = span.attributes
        if self._units and span.parent_span_id:  # most starts: no unit held, no lookup
            unit = self._units.get((span.trace_id, span.parent_span_id))
            if unit is not None:
                if attr.JOB_ID in attributes and attr.JOB_EVENT_TYPE not in attributes:
                    # The code names its own job inside: the dialect gives the unit no meaning
                    # (`Dialects.recognise`), so it is told now and the job's rows come live.
                    self._tell_unit(unit, recognised=False)
                    return False
                node = (span.trace_id, span.span_id)
                unit.members.add(node)
                unit.told.append(span)
                self._units[node] = unit
                return True
        dialects = self._dialects
        if dialects is None or attr.JOB_ID in attributes or attr.JOB_EVENT_TYPE in attributes:
            return False
        translator = self.translators.find(span.trace_id)
        if translator is not None and translator.scoped(span.parent_span_id):
            return False  # inside the code's own job: a step or plain span of it
        node = (span.trace_id, span.span_id)
        if node in self._units or dialects.may_start_job(span.name, span.kind, attributes) is None:
            return False
        unit = _Unit(span)
        self._units[node] = self._roots[node] = unit
        if len(self._roots) > self._max_units:
            _, oldest = self._roots.popitem(last=False)
            self._forget(oldest)
            if self._problem is not None:
                self._problem("dropped_unit", "a dialect's job span never ended: it is dropped")
        return True

    def _forget(self, unit: _Unit) -> None:
        self._roots.pop(unit.root, None)
        for member in unit.members:
            self._units.pop(member, None)

    def _tell_unit(self, unit: _Unit, *, recognised: bool = True) -> None:
        """Tell the unit's spans in order: at its root's end given their meaning; before it
        (``recognised`` False: a job of the code's own inside) as they came."""
        self._forget(unit)
        ended = {end[0].span_id: end[0] for end in unit.told if isinstance(end, tuple)}
        spans = [ended.get(told.span_id, told) for told in unit.told if isinstance(told, SpanFacts)]
        assert self._dialects is not None  # a unit is opened only with dialects
        meaning = self._dialects.recognise(spans) if recognised else spans
        meant = {span.span_id: span for span in meaning}
        for told in unit.told:
            if isinstance(told, tuple):
                span = meant[told[0].span_id]
                adjacency = self._adjacency
                if adjacency.held is None or not adjacency.adjacent(span):
                    self.settle()
                    self._verbs.ended(span)
            elif isinstance(told, SpanFacts):
                self.settle()
                span = meant[told.span_id]
                if span.end_ns:
                    self._adjacency.hold(span, whole=True)
                else:
                    self._verbs.started(span)  # still running: its end comes later, alone
            else:
                self.log(told)
        self.settle()


class _Verbs:
    """The verbs whole-when-adjacent tells a span by: its translation's, the commands to the
    sink. Apart from the `Interpreter` that holds the adjacency, so the two make no reference
    cycle: collect's interpreter (one per job) is freed at once, not by the cyclic collector."""

    __slots__ = ("sink", "translators")

    def __init__(self, translators: Translators, sink: CommandSink) -> None:
        self.translators = translators
        self.sink = sink

    def started(self, span: SpanFacts) -> None:
        self.tell(self.translators.of(span.trace_id).started(span))

    def whole(self, span: SpanFacts) -> None:
        self.tell(self.translators.of(span.trace_id).whole(span))

    def ended(self, span: SpanFacts) -> None:
        self.tell(self.translators.of(span.trace_id).ended(span))

    def tell(self, commands: list[Command]) -> None:
        handle = self.sink.handle
        for command in commands:
            handle(command)


# A span's (trace id, span id), read in C: no Python frame per start and end told.
_span_of: Callable[[SpanFacts], tuple[int, int]] = attrgetter("trace_id", "span_id")
