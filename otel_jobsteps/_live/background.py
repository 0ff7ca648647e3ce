"""One background queue engine: a FIFO drained by one named daemon thread.

Serves the writer thread and the writer process's relay alike. Application threads only append
(one length check, no lock, no I/O); flush requests travel through the same FIFO, so "everything
before the flush" is exactly what was appended before it. A forked child starts afresh.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

from opentelemetry import context as otel_context

from .._telemetry.stats import Stats

__all__ = ["BackgroundQueue", "FlushRequest", "Worker"]


class FlushRequest:
    """A flush in the queue: done once the worker settled everything before it; ok if written."""

    __slots__ = ("done", "number", "ok")

    def __init__(self, number: int) -> None:
        self.number = number
        self.ok = False
        self.done = threading.Event()


class Worker(Protocol):
    """What the engine's thread runs: the writer, or the relay."""

    def holding_back(self) -> bool:
        """True while queued items must wait (a backlog, no writer process yet)."""

    def next_due(self) -> float | None:
        """When the worker has something to do even with nothing queued (clock time)."""

    def work(self) -> None:
        """One round after a wait: take in what is queued, write or send what is due."""

    def finish(self) -> None:
        """The last round as the thread ends: everything queued, one last write, then release."""

    def holds_unwritten(self) -> bool:
        """True while the worker holds items taken from the queue and not yet written."""

    def flush_queued(self) -> None:
        """A flush was just queued (the relay starts a writer process for it at once)."""

    def flush_abandoned(self, request: FlushRequest) -> None:
        """Nobody waits for ``request`` any more (its caller timed out)."""

    def never_ran(self) -> None:
        """Shut down before any thread ran: release what the thread would have released."""

    def reset_after_fork(self) -> None:
        """In a forked child: drop the parent's state (connections, pipes) without using it."""


def _suppress_instrumentation() -> None:
    """Keep an instrumented driver from tracing our own I/O (a private OTel key)."""
    key = getattr(otel_context, "_SUPPRESS_INSTRUMENTATION_KEY", "suppress_instrumentation")
    otel_context.attach(otel_context.set_value(key, True))


def _forked(reference: weakref.ref[BackgroundQueue]) -> None:
    engine = reference()
    if engine is not None:
        engine.reset_after_fork()


class BackgroundQueue:
    """The FIFO, its named daemon thread, linger, flush, bounded shutdown and fork re-init."""

    def __init__(
        self,
        worker: Worker,
        stats: Stats,
        *,
        name: str,
        max_queue_size: int,
        linger_s: float,
        wake_threshold: int,
        clock: Callable[[], float] = time.monotonic,
        kind_of: Callable[[Any], str] = lambda item: type(item).__name__,
    ) -> None:
        self._worker, self._stats, self._name, self._clock = worker, stats, name, clock
        self._kind_of = kind_of  # names a dropped item in the counters
        self._max_queue, self._linger, self._wake_threshold = (
            max_queue_size,
            linger_s,
            wake_threshold,
        )
        self._flush_numbers = itertools.count(1)
        self._reset()
        os.register_at_fork(after_in_child=partial(_forked, weakref.ref(self)))

    def _reset(self) -> None:
        # Every lock and event anew: a parent's thread may have held one at fork() time.
        self.queue: deque[Any] = deque()
        self._wakeup = threading.Event()
        self._idle = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.stopping = False

    def reset_after_fork(self) -> None:
        """In a forked child: a fresh queue and thread, and the worker drops the parent's state."""
        self._reset()
        self._worker.reset_after_fork()

    # -- application threads ------------------------------------------------------------------

    def submit(self, item: Any) -> None:
        """Queue an item (dropped only when the queue is full or shut down): the hot path."""
        queue = self.queue
        if len(queue) >= self._max_queue or self.stopping:
            self._drop(item)
            return
        queue.append(item)
        if self._idle or len(queue) == self._wake_threshold or self._thread is None:
            self._wake()

    def _drop(self, item: Any) -> None:
        reason = "shut down" if self.stopping else "queue full"
        self._stats.problem("dropped_" + self._kind_of(item), reason)

    def _wake(self) -> None:
        if self._thread is None:
            self._start()
        self._wakeup.set()

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None or self.stopping:
                return
            thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            thread.start()
            self._thread = thread

    def flush(self, timeout_s: float) -> bool:
        """True once everything submitted before the call is written; False on timeout."""
        if self._thread is None or not self._thread.is_alive():
            # Nobody will write what is queued or held: done only if there is none.
            return not self.queue and not self._worker.holds_unwritten()
        request = FlushRequest(next(self._flush_numbers))
        self.queue.append(request)
        self._worker.flush_queued()
        self._wakeup.set()
        if request.done.wait(timeout_s):
            return request.ok
        self._worker.flush_abandoned(request)
        return False

    def shutdown(self, timeout_s: float) -> bool | None:
        """Stop taking items and give the thread ``timeout_s`` to finish: True if it ended,
        False if still busy (it ends on its own), None if none ran or this is a second call."""
        with self._lock:
            if self.stopping:
                return None
            self.stopping = True
            thread = self._thread  # settled: no thread starts once stopping is set
        self._wakeup.set()
        if thread is None:
            self._worker.never_ran()
            return None
        thread.join(timeout_s)
        return not thread.is_alive()

    def wake(self) -> None:
        """Cut the thread's wait short (a writer process died, say)."""
        self._wakeup.set()

    def length(self) -> int:
        return len(self.queue)

    @property
    def thread(self) -> threading.Thread | None:
        """The engine's thread: None until an item starts it (and in a fresh fork child)."""
        return self._thread

    # -- the thread ---------------------------------------------------------------------------

    def _run(self) -> None:
        _suppress_instrumentation()
        worker = self._worker
        try:
            while not self.stopping:
                self._wait()
                worker.work()
        finally:
            worker.finish()

    def _wait(self) -> None:
        """Sleep until there is work: a full batch at once, a few items after a short linger,
        an empty queue until a submit or until the worker is due."""
        if self.stopping:
            return
        queue = self.queue
        holding = self._worker.holding_back()
        if not holding and len(queue) >= self._wake_threshold:
            return
        due = self._worker.next_due()
        timeout = None if due is None else max(0.0, due - self._clock())
        if holding:
            self._wakeup.wait(timeout)  # only a flush, a shutdown or a wake cuts it short
        elif queue:
            # A batch is gathering. Submitters do not wake a lingering thread, so a busy job
            # pays no wake-up per item; a full batch or a flush ends the linger early.
            self._wakeup.wait(self._linger if timeout is None else min(timeout, self._linger))
        else:
            self._idle = True
            if not queue:  # checked again: a submit may have come before _idle was set
                self._wakeup.wait(timeout)
            self._idle = False
        self._wakeup.clear()

    def drain(
        self,
        limit: int,
        handle: Callable[[Any], None],
        flushed: Callable[[FlushRequest], None],
    ) -> int:
        """Hand up to ``limit`` queued items, in order, to ``handle`` (flush requests to
        ``flushed``); one bad item must not stop the rest. Returns how many were taken."""
        queue = self.queue
        count = min(len(queue), limit)
        for _ in range(count):
            item = queue.popleft()
            try:
                if type(item) is FlushRequest:
                    flushed(item)
                else:
                    handle(item)
            except Exception as error:  # noqa: BLE001 - counted; the next item goes on
                self._stats.problem("internal_error", error)
        return count

    def take_flushes(self) -> list[FlushRequest]:
        """Take the flush requests out of the queue, leaving the other items in order."""
        flushes = [item for item in list(self.queue) if type(item) is FlushRequest]
        for item in flushes:
            try:
                self.queue.remove(item)
            except ValueError:
                continue
        return flushes
