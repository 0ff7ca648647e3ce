"""The one interpreter both doors call: facts in the order they happened -> the translation ->
the commands a sink (the recorder) applies.

The processor's writer feeds it facts as they come off its queue; `collect` feeds it the facts
of a job, staged and new, in the order the processor would have seen them (`_core.order`). Here
lives what both doors read facts by: whole when adjacent (`_core.adjacent`), the translation of
each trace (`_core.translate`), and where the commands go. No I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .adjacent import Adjacency
from .commands import Command
from .facts import LogFacts, SpanFacts
from .translate import SpanTranslator

__all__ = ["CommandSink", "Interpreter", "OneTranslator", "PerTrace", "Translators"]


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


class Interpreter:
    """Facts in order -> commands for ``sink``. A start read after its span ended is held until
    the next fact: if that is its own end, the two are told as one (a step: one `StepRan`)."""

    __slots__ = ("_adjacency", "sink", "translators")

    def __init__(self, translators: Translators, sink: CommandSink) -> None:
        self.translators = translators
        self.sink = sink
        self._adjacency: Adjacency[SpanFacts] = Adjacency(self, _span_of)

    def start(self, span: SpanFacts, *, ended: bool = False, whole: bool = True) -> None:
        """A span's start. ``ended``: read after the span ended, so its end may come next;
        ``whole``: those two are one reading (not when the start carries values of its own, a
        job span's attributes as it started)."""
        adjacency = self._adjacency
        if adjacency.held is not None:
            adjacency.release()
        if ended:
            adjacency.hold(span, whole=whole)
        else:
            self.started(span)

    def end(self, span: SpanFacts) -> None:
        """A span's end: told with its start when that was held for it, else alone."""
        adjacency = self._adjacency
        if adjacency.held is not None:
            if adjacency.adjacent(span):
                return
            adjacency.release()
        self.ended(span)

    def log(self, record: LogFacts) -> None:
        """A log record: a step's progress, a log line, or nothing outside any job scope."""
        self.settle()  # the start held may be its span's
        translator = self.translators.find(record.trace_id)
        if translator is not None:
            self._tell(translator.log(record))

    def progress(
        self, trace_id: int, span_id: int, attributes: Mapping[str, Any], time_ns: int = 0
    ) -> bool:
        """A running step's newest progress event, seen while it runs (the processor's polls);
        True if it was recorded."""
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

    # -- the verbs whole-when-adjacent tells a span by ------------------------------------------

    def started(self, span: SpanFacts) -> None:
        self._tell(self.translators.of(span.trace_id).started(span))

    def whole(self, span: SpanFacts) -> None:
        self._tell(self.translators.of(span.trace_id).whole(span))

    def ended(self, span: SpanFacts) -> None:
        self._tell(self.translators.of(span.trace_id).ended(span))

    def _tell(self, commands: list[Command]) -> None:
        handle = self.sink.handle
        for command in commands:
            handle(command)


def _span_of(span: SpanFacts) -> tuple[int, int]:
    return span.trace_id, span.span_id
