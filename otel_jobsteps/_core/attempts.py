"""The attempts the recorder keeps open: each one's state, and the bound on how many.

Job spans that never end must not grow memory without bound: beyond ``max_open`` attempts
the oldest is forgotten, and a later command of it closes whichever step it holds open.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ConfigurationError
from .batch import EventRow
from .commands import Scope
from .debounce import Window

__all__ = ["DEFAULT_MAX_OPEN_ATTEMPTS", "Attempt", "Attempts", "OpenStep"]

DEFAULT_MAX_OPEN_ATTEMPTS = 10_000


@dataclass(slots=True, eq=False)
class OpenStep(Window):
    """A step's row while it is open; its progress is debounced (the `Window` fields)."""

    key: str
    row: EventRow
    attempt: Attempt
    holders: int = 1  # step spans of this key open at once: the last one to end closes it


@dataclass(slots=True, eq=False)
class Attempt:
    """One execution of one attempt: its open step, and the times its final row must follow."""

    scope: Scope
    execution_id: str
    trace_hex: str
    open: OpenStep | None = None
    last_step: str | None = None
    last_close_us: int = 0
    start_us: int = 0
    # Forgotten once (evicted) and seen again: the step it may hold open is not known here.
    forgotten: bool = False
    # Told again to a new writer process: its last step row, if any, is in the database only.
    resumed: bool = False
    # LOG rows written per step key (None: between steps) and lines dropped over the cap since
    # the last dropped-count row; None until the attempt's first log line (most have none).
    logs: dict[str | None, list[int]] | None = None


class Attempts:
    """Open attempts by job span (trace, span id), oldest first; ``on_forget`` gets the evicted."""

    def __init__(self, max_open: int, on_forget: Callable[[Attempt], None]) -> None:
        if isinstance(max_open, bool) or not (isinstance(max_open, int) and max_open >= 1):
            raise ConfigurationError(
                f"max_open_attempts must be a positive integer, got {max_open!r}"
            )
        self._max = max_open
        self._on_forget = on_forget
        # Ordered, so the oldest goes in O(1) (a plain dict's first key is found by walking
        # the slots of every key deleted before it).
        self._open: OrderedDict[tuple[int, int], Attempt] = OrderedDict()
        # Span ids of forgotten attempts, as bounded as the attempts themselves.
        self._forgotten: OrderedDict[tuple[int, int], None] = OrderedDict()
        # The attempt last found, by its scope object: a job's commands come in runs, and each
        # carries the very scope its job span's start made (no key built, no hash per command).
        self._recent_scope: Scope | None = None
        self._recent: Attempt | None = None

    def __len__(self) -> int:
        return len(self._open)

    def all(self) -> list[Attempt]:
        return list(self._open.values())

    def held(self) -> list[tuple[tuple[int, int], Attempt]] | None:
        """The open attempts by key; None once one was forgotten (a state would be partial)."""
        return None if self._forgotten else list(self._open.items())

    def adopt(self, key: tuple[int, int], attempt: Attempt) -> None:
        self._recent_scope = self._recent = None
        self._open[key] = attempt

    def get(self, scope: Scope) -> Attempt | None:
        if scope is self._recent_scope:
            return self._recent
        state = self._open.get((scope.trace_id, scope.span_id))
        if state is not None:
            self._recent_scope, self._recent = scope, state
        return state

    def pop(self, scope: Scope) -> Attempt:
        """The attempt a job's end closes: the open one, else a new one (forgotten, or never
        seen)."""
        self._recent_scope = self._recent = None
        state = self._open.pop((scope.trace_id, scope.span_id), None)
        return self.new(scope) if state is None else state

    def open(self, scope: Scope) -> Attempt:
        """The attempt of ``scope``, opened if it is new (the oldest forgotten past the bound)."""
        recent = self._recent
        if scope is self._recent_scope and recent is not None:
            return recent
        key = (scope.trace_id, scope.span_id)
        state = self._open.get(key)
        if state is None:
            state = self.new(scope)
            if len(self._open) >= self._max:
                self._forget_oldest()
            self._open[key] = state
        self._recent_scope, self._recent = scope, state
        return state

    def new(self, scope: Scope) -> Attempt:
        trace_hex = format(scope.trace_id, "032x")
        execution_id = scope.execution or f"{trace_hex}:{scope.span_id:016x}"
        forgotten = self._forgotten.pop((scope.trace_id, scope.span_id), False) is None
        return Attempt(scope, execution_id, trace_hex, forgotten=forgotten)

    def _forget_oldest(self) -> None:
        self._recent_scope = self._recent = None
        key, state = self._open.popitem(last=False)
        self._forgotten[key] = None
        if len(self._forgotten) > self._max:
            self._forgotten.popitem(last=False)
        self._on_forget(state)
