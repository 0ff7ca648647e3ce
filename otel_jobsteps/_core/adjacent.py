"""Whole when adjacent, the rule both doors tell spans by: a span's start whose very next item,
in the order the door tells them, is its own end is told once, whole (a step: one `StepRan`,
not a start and an end). A start read apart from its end (a job span whose start values are
kept) is never told whole."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

__all__ = ["Adjacency", "Teller"]

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class Teller(Protocol[T_contra]):
    """What a span is told to: the translation's verbs (or what feeds them)."""

    def started(self, start: T_contra, /) -> None: ...
    def whole(self, end: T_contra, /) -> None: ...
    def ended(self, end: T_contra, /) -> None: ...


class Adjacency(Generic[T]):
    """Holds one start until the next item says whether its end is adjacent. ``key``: what
    makes an end the held start's own (its span id, or the very same facts)."""

    __slots__ = ("_held_key", "_key", "_whole", "held", "teller")

    def __init__(self, teller: Teller[T], key: Callable[[T], Hashable]) -> None:
        self.teller = teller
        self._key = key
        self.held: T | None = None  # read-only outside: a door may skip a call when None
        self._held_key: Hashable = None
        self._whole = False

    def hold(self, start: T, *, whole: bool) -> None:
        """A start whose end may come next (``whole``: the two are one reading); a start held
        before it is told alone."""
        if self.held is not None:
            self.release()
        self.held, self._held_key, self._whole = start, self._key(start), whole

    def adjacent(self, end: T) -> bool:
        """Tell ``end`` with the start held for it when it is that start's own: True if so
        (whole, or the start then the end); False: nothing told."""
        held = self.held
        if held is None or self._key(end) != self._held_key:
            return False
        self.held = None
        if self._whole:
            self.teller.whole(end)
        else:
            self.teller.started(held)
            self.teller.ended(end)
        return True

    def release(self) -> None:
        """Something else comes next: the start held, if any, is told alone."""
        held = self.held
        if held is not None:
            self.held = None
            self.teller.started(held)
