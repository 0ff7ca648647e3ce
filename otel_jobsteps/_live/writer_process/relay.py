"""The relay: the job's queue -> facts -> frames to the writer process (opt-in).

With ``JobStepsProcessor(writer="process")`` the job's hooks queue spans exactly as with the
writer thread; the relay thread reads them as facts (`_live.watch`) and sends the facts, in order,
through a pipe to a writer process (`main`) that interprets and writes them as the writer
thread would. The job's interpreter then spends per span only the hooks and the encoding.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from ..._telemetry.log import logger
from ..._telemetry.metrics import ClosedStep, Committed, FinishedAttempt
from ..._telemetry.stats import Stats
from ..background import BackgroundQueue, FlushRequest
from ..settings import Settings
from ..watch import SpanWatch
from .outbox import Outbox
from .process import ChildCounters, WriterChild
from .wire import (
    FLUSH,
    FLUSHED,
    METRICS,
    REPLAYED,
    RESOURCE,
    WARNING,
    read_frames,
    write_frame,
)

__all__ = ["Relay"]

_MAX_BATCH_ITEMS = 10_000
_RESTART_BACKOFF_S = (0.5, 30.0)


class Relay:
    """Queue -> facts -> frames to the writer process, with `_live.writer.Writer`'s contract.

    While no writer process runs (starting, or replacing a dead one) the queue waits, bounded.
    """

    def __init__(
        self,
        watch: Callable[[Outbox], SpanWatch],
        settings: Settings,
        stats: Stats,
        *,
        max_queue_size: int,
        linger_s: float = 0.001,
        wake_threshold: int = 1000,
        clock: Callable[[], float] = time.monotonic,
        on_committed: Callable[[Committed], None] = lambda committed: None,
    ) -> None:
        self._make_watch = watch
        self._on_committed = on_committed  # what the writer process's batches changed
        self._settings = settings
        self._stats = stats
        self._clock = clock
        self._queue = BackgroundQueue(
            self,
            stats,
            name="otel_jobsteps-relay",
            max_queue_size=max_queue_size,
            linger_s=linger_s,
            wake_threshold=wake_threshold,
            clock=clock,
        )
        self.submit = self._queue.submit  # the hot path: a bare deque append
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._outbox = Outbox(self._settings.max_open_spans)
        self._watch = self._make_watch(self._outbox)
        self._watch.backlogged = lambda: bool(self._counters.latest.get("backlogged"))
        self._child: WriterChild | None = None
        self._fds: set[int] = set()  # every pipe end open in this process
        self._flushes: dict[int, FlushRequest] = {}
        self._failures = 0
        self._restart_at = 0.0
        self._flush_waiting = False
        self._started_one = False  # a writer process started before: the next one is told
        self._counters = ChildCounters()

    # -- application threads ------------------------------------------------------------------

    def flush(self, timeout_s: float) -> bool:
        """True once everything submitted before the call is committed; False on timeout."""
        return self._queue.flush(timeout_s)

    def shutdown(self, timeout_s: float) -> None:
        """Send what is queued, close the pipe and wait up to ``timeout_s`` for the writer
        process to write it; one still busy then finishes on its own."""
        deadline = time.monotonic() + timeout_s
        if self._queue.shutdown(timeout_s) is None:
            return
        child = self._child
        if child is not None:
            try:
                child.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._stats.problem("shutdown_timeout", f"writer process busy after {timeout_s}s")
            else:  # its final counters (what it dropped) are read before stats() is asked
                child.replies_read.wait(max(0.0, deadline - time.monotonic()))

    def queue_length(self) -> int:
        return self._queue.length()

    def child_stats(self) -> dict[str, Any]:
        """The writer processes' counters (never going back when one is replaced)."""
        return self._counters.merged()

    # -- the background queue's worker (engine callbacks) ---------------------------------------

    def holding_back(self) -> bool:
        # No writer process to send to: the queue waits (bounded) until the next start.
        return self._child is None and self._clock() < self._restart_at and not self._flush_waiting

    def next_due(self) -> float | None:
        return self._restart_at if self.holding_back() else self._watch.next_poll()

    def holds_unwritten(self) -> bool:
        return bool(self._outbox.messages)

    def flush_queued(self) -> None:
        self._flush_waiting = True  # a flush is worth one start now, backoff or not

    def flush_abandoned(self, request: FlushRequest) -> None:
        self._flushes.pop(request.number, None)

    def never_ran(self) -> None:
        return None

    def reset_after_fork(self) -> None:
        """The parent's pipe ends are closed here (untouched in the parent); a new writer
        process starts when this child first queues."""
        for fd in list(self._fds):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._init_runtime()

    # -- the relay thread ---------------------------------------------------------------------

    def work(self) -> None:
        self._relay_safely(final=False)

    def finish(self) -> None:
        self._relay_safely(final=True)
        with contextlib.suppress(Exception):
            self._watch.poll_all()
            self._send()
        if self._child is not None:
            self._child.close_pipe()

    def _relay_safely(self, *, final: bool) -> None:
        try:
            self._relay_queued(final=final)
        except Exception as error:  # noqa: BLE001 - a bug must not stop the relay
            self._stats.problem("internal_error", error)
            self._lost(self._outbox.take(), error)

    def _relay_queued(self, *, final: bool) -> None:
        if not final:
            flushing = self._flush_waiting
            if self._running_child() is None:
                # Kept queued: nothing is read into facts that could not be sent. A flush
                # that asked for a start which failed is answered now (not committed).
                if flushing:
                    for request in self._queue.take_flushes():
                        request.done.set()
                return
        while True:
            self._queue.drain(_MAX_BATCH_ITEMS, self._watch.handle, self._flush_read)
            self._watch.poll_due(self._clock())
            self._send()
            if not (final and self._queue.queue):
                return

    def _flush_read(self, request: FlushRequest) -> None:
        self._watch.poll_all()
        self._flushes[request.number] = request
        self._outbox.flush(request.number)

    def _send(self) -> None:
        if not self._outbox.messages:
            return
        child = self._running_child()  # a new one is told first what is open
        messages = self._outbox.take()
        if child is None:
            self._lost(messages, "writer process not running")
            return
        try:
            write_frame(child.to_fd, messages)
        except OSError as error:  # it is gone: its replies' reader says so and counts it
            self._lost(messages, error)
            self._retire(child)

    def _running_child(self) -> WriterChild | None:
        """The writer process, started (again) if there is none and its backoff is over."""
        child = self._child
        if child is not None and not child.exited:
            return child
        if child is not None:
            self._retire(child)
        if self._clock() < self._restart_at and not (self._queue.stopping or self._flush_waiting):
            return None  # shutting down or flushing, one start is tried regardless
        self._flush_waiting = False
        child = self._start_child()
        if child is None:
            self._schedule_restart()
            return None
        self._child = child
        if self._started_one:
            # The spans the dead one knew are still open here: their ends must find them.
            self._outbox.replay()
            self._watch.offer_progress_again()
        self._started_one = True
        return child

    def _start_child(self) -> WriterChild | None:
        """A new writer process with its replies' reader, or None (counted) if either failed."""
        try:
            child = WriterChild(self._settings, self._fds)
        except Exception as error:  # noqa: BLE001 - whatever it was, try again later
            self._stats.problem("writer_process_failed", error)
            return None
        try:
            threading.Thread(
                target=self._read_replies,
                args=(child,),
                name="otel_jobsteps-relay-replies",
                daemon=True,
            ).start()
        except Exception as error:  # noqa: BLE001 - no replies, no writer process
            self._stats.problem("writer_process_failed", error)
            child.close_pipe()
            return None
        return child

    def _retire(self, child: WriterChild) -> None:
        """Relay thread only (it owns the pipe's writing end): forget a writer process."""
        child.close_pipe()
        if self._child is child:
            self._child = None
            self._schedule_restart()

    def _committed(self, steps: list[Any], attempts: list[Any]) -> None:
        committed = Committed(
            list(map(ClosedStep._make, steps)), list(map(FinishedAttempt._make, attempts))
        )
        try:
            self._on_committed(committed)
        except Exception as error:  # noqa: BLE001 - metrics must not stop the replies
            self._stats.problem("internal_error", error)

    def _read_replies(self, child: WriterChild) -> None:
        """The writer process's replies, on their own thread, until it exits."""
        try:
            for frame in read_frames(child.from_fd):
                for reply in frame:
                    if reply[0] == FLUSHED:
                        _, number, ok, self._counters.latest = reply
                        self._flushed(number, ok)
                    elif reply[0] == WARNING:  # a warning of the writer process's
                        logger.log(reply[1], "%s (writer process %d)", reply[2], child.process.pid)
                    elif reply[0] == METRICS:
                        self._committed(reply[1], reply[2])
                    else:  # STATS
                        self._counters.latest = reply[1]
        except Exception as error:  # noqa: BLE001 - a reply it cannot read: that process goes
            self._stats.problem("writer_process_failed", error)
            with contextlib.suppress(OSError):
                child.process.kill()
        finally:
            self._exited(child)

    def _flushed(self, number: int, ok: bool) -> None:
        """Flush ``number`` and those before it are done (committed if ``ok``)."""
        self._failures = 0  # it committed what it was sent: a later death backs off afresh
        flushes = self._flushes
        for done in [n for n in list(flushes) if n <= number]:
            request = flushes.pop(done, None)
            if request is not None:
                request.ok = ok
                request.done.set()

    def _exited(self, child: WriterChild) -> None:
        child.process.wait()
        child.close_replies()
        self._counters.retire()
        child.exited = True
        child.replies_read.set()
        if self._queue.stopping:
            return
        # What it held is lost; the flushes waiting on it cannot say "committed".
        self._stats.problem(
            "writer_process_exited", f"writer process exited ({child.process.returncode})"
        )
        for number in list(self._flushes):
            request = self._flushes.pop(number, None)
            if request is not None:
                request.done.set()
        self._queue.wake()

    def _schedule_restart(self) -> None:
        self._failures += 1
        first, most = _RESTART_BACKOFF_S
        self._restart_at = self._clock() + min(most, first * 2 ** (self._failures - 1))

    def _lost(self, messages: list[Any], error: object) -> None:
        self._stats.problem("dropped_facts", error)
        # A replay is not lost: the spans it tells stay open here, told to the next one.
        lost = [m for m in messages if m[0] not in (FLUSH, REPLAYED, RESOURCE)]
        self._stats.add("dropped_facts", max(0, len(lost) - 1))
        for message in messages:
            if message[0] == FLUSH:
                request = self._flushes.pop(message[1], None)
                if request is not None:
                    request.done.set()
