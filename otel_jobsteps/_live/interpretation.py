"""Door one's fields -> facts -> the one interpreter (`_core.interpreter`) -> the recorder.

Used by the writer thread and by the writer process alike, so it imports neither the
processor, the store nor psycopg.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .._core.batch import Batch
from .._core.dialects import select_dialects
from .._core.facts import LogFacts, SpanFacts
from .._core.interpreter import Interpreter, OneTranslator
from .._core.recorder import DEFAULT_LOGS_MAX_PER_STEP, StepRecorder
from .._core.translate import DEFAULT_LOGS_MIN_SEVERITY, SpanTranslator
from .._telemetry.stats import Stats
from .watch import ended_facts

__all__ = ["FactsHandler", "FactsSource", "LiveFacts", "build_interpretation"]


class LiveFacts:
    """The fields a source read (the watch of live spans, or the writer process's pipe) as facts
    for ``interpreter``; running steps' progress is shed while the writer is backlogged."""

    def __init__(self, interpreter: Interpreter, translator: SpanTranslator, stats: Stats) -> None:
        self.interpreter = interpreter
        self.translator = translator  # the one translation of every trace (its open spans)
        self._stats = stats
        self.backlogged: Callable[[], bool] = lambda: False  # the writer's, once it exists

    def started(self, fields: tuple[Any, ...], ended: bool, whole: bool) -> None:
        self.interpreter.start(SpanFacts(*fields), ended=ended, whole=whole)

    def ended(self, fields: tuple[Any, ...]) -> None:
        self.interpreter.end(ended_facts(fields))

    def whole(self, fields: tuple[Any, ...]) -> None:
        """A start read after its span ended, one reading with its end, and that end: the
        ended facts stand for both (a whole start's values are its end's)."""
        facts = ended_facts(fields)
        self.interpreter.start(facts, ended=True, whole=True)
        self.interpreter.end(facts)

    def resumed(self, fields: tuple[Any, ...]) -> None:
        """A span a dead writer process had seen start (its start's fields)."""
        self.interpreter.resume(SpanFacts(*fields))

    def log(self, fields: tuple[Any, ...]) -> None:
        """A log record's progress or log line (never shed: nothing reads it again)."""
        self.interpreter.log(LogFacts(*fields))

    def progress(
        self, trace_id: int, span_id: int, attributes: Mapping[str, Any], time_ns: int = 0
    ) -> bool:
        """Record a running step's progress; False when shed (the writer is backlogged)."""
        if self.backlogged():
            self._stats.problem("dropped_ProgressReported", "backlog: progress not read")
            return False
        if self.interpreter.progress(trace_id, span_id, attributes, time_ns):
            self._stats.add("commands", 1)
        return True


def build_interpretation(
    stats: Stats,
    *,
    debounce_ms: float,
    max_open_spans: int,
    clock: Callable[[], float] = time.monotonic,
    logs_min_severity: int = DEFAULT_LOGS_MIN_SEVERITY,
    logs_max_per_step: int = DEFAULT_LOGS_MAX_PER_STEP,
    dialects: tuple[str, ...] = (),
) -> tuple[LiveFacts, StepRecorder]:
    """The interpreter of live spans (with the ``dialects`` named), its translation and
    recorder, counting into ``stats``."""
    recorder = StepRecorder(
        debounce_ms=debounce_ms,
        clock=clock,
        on_evict=lambda scope: stats.problem(
            "evicted_attempts", "a job span never ended: its attempt is forgotten"
        ),
        logs_max_per_step=logs_max_per_step,
    )
    translator = SpanTranslator(
        problem=stats.problem,
        received=False,
        max_open_spans=max_open_spans,
        logs_min_severity=logs_min_severity,
    )
    interpreter = Interpreter(
        OneTranslator(translator),
        recorder,
        dialects=select_dialects(dialects),
        problem=stats.problem,
    )
    return LiveFacts(interpreter, translator, stats), recorder


class FactsSource(Protocol):
    """What reads the writer's items as fields for `LiveFacts`: the watch of live spans, or
    the writer process's pipe."""

    backlogged: Callable[[], bool]
    clock: Callable[[], float]

    def handle(self, item: Any) -> None: ...
    def next_poll(self) -> float | None: ...
    def poll_due(self, now: float) -> None: ...
    def poll_all(self) -> None: ...


class FactsHandler:
    """The writer's handler: its items read by ``source`` and told to the interpreter of
    ``facts``, whose rows ``recorder`` holds; the batch, timers and open steps asked here."""

    def __init__(self, source: FactsSource, facts: LiveFacts, recorder: StepRecorder) -> None:
        self.source = source
        self.facts = facts
        self.recorder = recorder

    def handle(self, item: Any) -> None:
        self.source.handle(item)

    def pending_operations(self) -> int:
        return self.recorder.pending_operations()

    def open_spans(self) -> int:
        return self.facts.translator.open_spans()

    def shed_progress_when(self, backlogged: Callable[[], bool]) -> None:
        """The writer's backlog test: polling and recording progress both stop while it holds."""
        self.source.backlogged = self.facts.backlogged = backlogged

    # -- the writer's interface ---------------------------------------------------------------

    def next_due(self) -> float | None:
        due = self.recorder.next_due()
        poll = self.source.next_poll()
        if poll is not None and (due is None or poll < due):
            return poll
        return due

    def fire_due(self, now: float | None = None) -> None:
        now = self.source.clock() if now is None else now
        self.source.poll_due(now)
        self.facts.interpreter.settle()
        self.recorder.fire_due(now)

    def flush_timers(self) -> None:
        """A flush: every progress added before it is read now, and every window written."""
        self.source.poll_all()
        self.facts.interpreter.settle()
        self.recorder.flush_timers()

    def take_batch(self) -> Batch | None:
        self.facts.interpreter.settle()
        return self.recorder.take_batch()

    def open_steps(self) -> list[tuple[str, str, int, str]]:
        self.facts.interpreter.settle()
        return self.recorder.open_steps()
