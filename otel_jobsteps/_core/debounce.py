"""The progress debounce: at most one write per window per step, the latest detail at its end.

Pure logic with an injectable clock: one heap holds every waiting trailing write, no timers."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from .batch import Detail

__all__ = ["Debounce", "Window"]


@dataclass(slots=True, eq=False, kw_only=True)
class Window:
    """What is debounced (the recorder's open step is one): its debounce state."""

    last_write: float | None = None
    pending: Detail | None = None
    due: float | None = None


W = TypeVar("W", bound=Window)


class Debounce(Generic[W]):
    """Decides when a window's progress is written, and keeps the trailing writes' deadlines."""

    def __init__(self, *, window_seconds: float, clock: Callable[[], float]) -> None:
        self._window = window_seconds
        self.now = clock  # the injected clock, read by whoever decides with this debounce
        self._heap: list[tuple[float, int, W]] = []
        self._sequence = itertools.count()

    def coalesced(self, window: W, now: float) -> None:
        """The detail rode in the step's still unwritten row: the first time opens the window."""
        if window.last_write is None:
            window.last_write = now

    def written(self, window: W, now: float) -> None:
        window.last_write = now

    def offer(self, window: W, detail: Detail, now: float) -> Detail | None:
        """The detail to write now, or None: it waits for the window's end (latest one wins)."""
        if window.last_write is None or now - window.last_write >= self._window:
            window.pending = None
            window.due = None
            return detail
        window.pending = detail
        if window.due is None:
            window.due = window.last_write + self._window
            heapq.heappush(self._heap, (window.due, next(self._sequence), window))
        return None

    def cancel(self, window: W) -> Detail | None:
        """Drop the waiting trailing write; returns its detail (a close carries it instead)."""
        window.due = None
        detail = window.pending
        window.pending = None
        return detail

    def next_due(self) -> float | None:
        """Clock time of the earliest trailing write, if any is waiting."""
        heap = self._heap
        while heap and heap[0][2].due != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def expired(self, now: float | None) -> list[tuple[W, Detail]]:
        """Take the trailing writes whose window ended by ``now`` (None: all), earliest first."""
        heap = self._heap
        taken = []
        while heap and (now is None or heap[0][0] <= now):
            due, _, window = heapq.heappop(heap)
            if window.due == due and (detail := self.cancel(window)) is not None:
                taken.append((window, detail))
        return taken

    def waiting(self) -> list[W]:
        """The windows with a trailing write waiting, in heap order."""
        return [window for due, _, window in self._heap if window.due == due]
