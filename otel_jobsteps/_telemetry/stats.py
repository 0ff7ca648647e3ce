"""Counters of the hot path and warnings that are logged at most once per interval."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from ..errors import describe
from .log import logger

__all__ = ["Stats"]


class Stats:
    """Thread-safe counters plus a rate-limited warning that carries the running count."""

    _lock: threading.Lock
    _counts: Counter[str]
    _last_error: str | None
    _last_raw: bool  # _last_error is a text as given, not yet made printable
    _last_warned: dict[str, float]

    def __init__(self, *, warn_interval_s: float = 60.0) -> None:
        self._warn_interval = warn_interval_s
        self.reset()

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counts[name] += amount

    def get(self, name: str) -> int:
        with self._lock:
            return self._counts[name]

    def problem(self, kind: str, error: object) -> None:
        """Count a problem and warn unless a warning of this kind went out recently.

        A text is made printable only when read, so a frequent one costs only a count.
        """
        if type(error) is str:
            text, raw = error, True
        else:
            text, raw = self._describe(error), False
        now = time.monotonic()
        with self._lock:
            counts = self._counts
            count = counts[kind] + 1
            counts[kind] = count
            self._last_error, self._last_raw = text, raw
            last = self._last_warned.get(kind)
            if last is not None and now - last < self._warn_interval:
                return
            self._last_warned[kind] = now
        logger.warning(
            "otel_jobsteps %s (%d so far): %s", kind, count, describe(text) if raw else text
        )

    @staticmethod
    def _describe(error: object) -> str:
        """The one line of an error, with its type and SQLSTATE when it is an exception."""
        text = describe(error)
        if isinstance(error, BaseException):
            name = type(error).__name__
            sqlstate = getattr(error, "sqlstate", None)
            text = f"{name} [{sqlstate}]: {text}" if sqlstate else f"{name}: {text}"
        return text

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            data: dict[str, Any] = dict(self._counts)
            last, raw = self._last_error, self._last_raw
        data["last_error"] = describe(last) if raw and last is not None else last
        return data

    def reset(self) -> None:
        """Start afresh: new counts and a new lock, the old one never taken.

        For a forked child, where the parent's lock may be held by a thread that is not there.
        """
        self._lock = threading.Lock()
        self._counts = Counter()
        self._last_error, self._last_raw = None, False
        self._last_warned = {}
