"""Log records written as LOG rows without deriving their attempt again, by the live door's own
rules: the translator of the job's state for a record whose span it holds open (progress too),
else the line as `log_line` makes it in the context the staged skeletons give (the attempt's
job span, the step the record's span lies in); kept or counted by `StepRows.log`'s cap on the
attempt as its job's state holds it (running) or as its rows tell (ended). Pure: the rows come
out of a recorder; the lines a cap dropped after their step closed are returned, to be added to
that step's dropped-count row."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .._core.attempts import Attempt as Held
from .._core.commands import Command, LogRecorded, Scope
from .._core.limits import step_key_text
from .._core.recorder import StepRecorder
from .._core.translate import SpanTranslator
from .ids import ID_MASK, signed
from .place import EVENT, JOB, NAMING_EVENT, Staged
from .state import JobState, restore

__all__ = ["Context", "Late", "Lines", "ended_attempt", "line_context"]

Context = tuple[int, str | None]  # the job span's id, the step key (None: between steps)
Late = tuple[Held, str | None, int]  # a line past the cap of a closed step: attempt, key, µs


def line_context(
    nodes: Mapping[tuple[str, int], Staged], trace: str, span_id: int
) -> Context | None:
    """The record's job span and step: the nearest span from its own up that carries a step
    key, below the job span (as the translator keeps them for open spans); None without a job
    span, or through an event span (the derivation decides such a context)."""
    key: str | None = None
    node_id = signed(span_id)
    for _ in range(1000):
        node = nodes.get((trace, node_id))
        if node is None or node.skeleton.kind in (EVENT, NAMING_EVENT):
            return None
        if node.skeleton.kind == JOB:
            return node_id & ID_MASK, key
        if key is None:
            key = node.step_key
        node_id = signed(node.skeleton.parent)
    return None


def ended_attempt(scope: Scope, execution: str | None, counts: Mapping[str | None, int]) -> Held:
    """An attempt whose final row is written, as the recorder would hold it: its execution and
    its LOG rows per step key (``counts``), nothing dropped since its dropped-count rows."""
    trace_hex = format(scope.trace_id, "032x")
    execution_id = execution or f"{trace_hex}:{scope.span_id:016x}"
    logs = {key: [count, 0] for key, count in counts.items()}
    return Held(scope, execution_id, trace_hex, logs=logs)


class Lines:
    """One request's lines of the attempts it resumes or adopts, under ``cap`` per step key."""

    def __init__(self, cap: int) -> None:
        self.recorder = StepRecorder(debounce_ms=0, logs_max_per_step=cap)
        self.late: list[Late] = []
        self._ended: set[int] = set()  # ids of the ended attempts adopted

    def resume(
        self, state: JobState, translator: Callable[[], SpanTranslator]
    ) -> dict[int, SpanTranslator]:
        """A job's running attempts as its state holds them, and its translators per trace:
        what their cap drops from an open step (or between steps) is kept for the rows written
        when those close, as live."""
        return restore(state, self.recorder, translator)

    def adopt_ended(self, held: Held) -> None:
        """An attempt whose final row is written (`ended_attempt`)."""
        self.recorder.adopt_attempt((held.scope.trace_id, held.scope.span_id), held)
        self._ended.add(id(held))

    def record(self, held: Held, commands: list[Command]) -> None:
        """What the translator made of a record: a line (`line`), or its step's progress."""
        for command in commands:
            if isinstance(command, LogRecorded):
                self.line(held, command)
            else:
                self.recorder.handle(command)

    def line(self, held: Held, command: LogRecorded) -> None:
        """A LOG row, or a line the cap drops: counted in ``held`` while the step it lies in is
        open (or it lies between steps of a running attempt), else returned in `late`."""
        key = None if command.key is None else step_key_text(command.key)  # as StepRows.log
        counts = held.logs.get(key) if held.logs is not None else None
        dropped = 0 if counts is None else counts[1]
        self.recorder.handle(command)
        counts = held.logs.get(key) if held.logs is not None else None
        if counts is None or counts[1] == dropped:
            return  # written
        step_open = held.open is not None and held.open.key == key
        if id(held) in self._ended or not (key is None or step_open):
            counts[1] -= 1
            self.late.append((held, key, command.time_ns // 1000))
