"""Facts -> the translation's commands -> the recorder: where a span becomes row operations.

Used by the writer thread and by the writer process alike, so it imports neither the
processor, the store nor psycopg.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .._core.batch import Batch
from .._core.facts import LogFacts, SpanFacts
from .._core.recorder import DEFAULT_LOGS_MAX_PER_STEP, StepRecorder
from .._core.translate import DEFAULT_LOGS_MIN_SEVERITY, SpanTranslator
from .._telemetry.stats import Stats
from .watch import fields_facts

__all__ = ["FactsHandler", "FactsSource", "Interpretation", "build_interpretation"]


class Interpretation:
    """Facts -> the translation's commands -> the recorder; progress is shed while backlogged."""

    def __init__(
        self,
        recorder: StepRecorder,
        translator: SpanTranslator,
        *,
        count: Callable[[str, int], None],
        problem: Callable[[str, object], None],
    ) -> None:
        self.recorder = recorder
        self.translator = translator
        self._record = recorder.handle
        self._count = count
        self._problem = problem
        self.backlogged: Callable[[], bool] = lambda: False  # the writer's, once it exists

    def started(self, facts: SpanFacts) -> None:
        for command in self.translator.started(facts):
            self._record(command)

    def resumed(self, facts: SpanFacts) -> None:
        """A span a dead writer process had seen start: its rows may exist already."""
        for command in self.translator.started(facts):
            self.recorder.resume(command)

    def whole(self, facts: SpanFacts) -> None:
        for command in self.translator.whole(facts):
            self._record(command)

    def ended(self, facts: SpanFacts) -> None:
        for command in self.translator.ended(facts):
            self._record(command)

    def log(self, facts: LogFacts) -> None:
        """A log record's progress or log line (never shed: nothing reads it again)."""
        for command in self.translator.log(facts):
            self._record(command)

    def progress(self, span_id: int, attributes: Mapping[str, Any], time_ns: int = 0) -> bool:
        """Record a running step's progress; False when shed (the writer is backlogged)."""
        if self.backlogged():
            self._problem("dropped_ProgressReported", "backlog: progress not read")
            return False
        progress = self.translator.progress(span_id, attributes, time_ns)
        if progress is not None:
            self._count("commands", 1)
            self._record(progress)
        return True


def build_interpretation(
    stats: Stats,
    *,
    debounce_ms: float,
    max_open_spans: int,
    clock: Callable[[], float] = time.monotonic,
    logs_min_severity: int = DEFAULT_LOGS_MIN_SEVERITY,
    logs_max_per_step: int = DEFAULT_LOGS_MAX_PER_STEP,
) -> Interpretation:
    """The translation and the recorder for live spans, counting into ``stats``."""
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
    return Interpretation(recorder, translator, count=stats.add, problem=stats.problem)


class FactsSource(Protocol):
    """What reads the writer's items as fields for the handler: the watch of live spans, or
    the writer process's pipe."""

    backlogged: Callable[[], bool]
    clock: Callable[[], float]

    def handle(self, item: Any) -> None: ...
    def next_poll(self) -> float | None: ...
    def poll_due(self, now: float) -> None: ...
    def poll_all(self) -> None: ...
    def settle(self) -> None: ...


class FactsHandler:
    """The writer's handler: its items read by ``source`` as fields, here made facts for the
    interpretation; the recorder's batch, timers and open steps asked once, here."""

    def __init__(
        self, interpretation: Interpretation, source: Callable[[FactsHandler], FactsSource]
    ) -> None:
        self.interpretation = interpretation
        self.recorder = recorder = interpretation.recorder
        self.progress = interpretation.progress
        self.source = source(self)
        self.handle = self.source.handle
        self.pending_operations = recorder.pending_operations

    def shed_progress_when(self, backlogged: Callable[[], bool]) -> None:
        """The writer's backlog test: polling and recording progress both stop while it holds."""
        self.source.backlogged = self.interpretation.backlogged = backlogged

    # -- the source's fields, as facts --------------------------------------------------------

    def started(self, fields: tuple[Any, ...]) -> None:
        self.interpretation.started(SpanFacts(*fields))

    def whole(self, fields: tuple[Any, ...]) -> None:
        self.interpretation.whole(fields_facts(fields))

    def ended(self, fields: tuple[Any, ...]) -> None:
        self.interpretation.ended(fields_facts(fields))

    def resumed(self, fields: tuple[Any, ...]) -> None:
        self.interpretation.resumed(fields_facts(fields))

    def log(self, fields: tuple[Any, ...]) -> None:
        self.interpretation.log(LogFacts(*fields))

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
        self.recorder.fire_due(now)

    def flush_timers(self) -> None:
        """A flush: every progress added before it is read now, and every window written."""
        self.source.poll_all()
        self.recorder.flush_timers()

    def take_batch(self) -> Batch | None:
        self.source.settle()
        return self.recorder.take_batch()

    def open_steps(self) -> list[tuple[str, str, int, str]]:
        self.source.settle()
        return self.recorder.open_steps()
