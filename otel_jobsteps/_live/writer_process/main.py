"""The writer process's main: facts from the relay's pipe -> interpretation -> the writer.

Started by `relay.Relay` with the pipe's two descriptors; the first frame holds its settings.
It writes exactly as the writer thread does and answers each flush once it is committed; it
ends when its input closes, writing what it holds within the shutdown timeout.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from ..._telemetry.log import logger
from ..._telemetry.metrics import Committed
from ..._telemetry.stats import Stats
from ..interpretation import FactsHandler, LiveFacts
from ..settings import Settings
from ..writer import Writer
from ..writer_side import build_handler, build_store, build_writer, snapshot
from .wire import (
    ENDED,
    FLUSH,
    FLUSHED,
    LOG,
    METRICS,
    PROGRESS,
    REPLAYED,
    RESOURCE,
    STARTED,
    STATS,
    WARNING,
    WHOLE,
    read_frames,
    write_frame,
)

__all__ = ["main"]

_STATS_EVERY_S = 0.5
_FULL_QUEUE_PAUSE_S = 0.01
# Relay messages by the name the writer thread's counters give the same thing.
_KINDS = {
    STARTED: "SpanStarted",
    REPLAYED: "SpanStarted",
    ENDED: "SpanEnded",
    WHOLE: "SpanEnded",
    PROGRESS: "ProgressReported",
    LOG: "LogEmitted",
}
_FLUSH_WAIT_S = 3600.0  # the relay's caller decides how long it waits


class _Received:
    """The writer's facts source here: the relay's messages, already read as fields there."""

    backlogged: Callable[[], bool] = staticmethod(lambda: False)  # the relay polls, not this
    clock: Callable[[], float] = staticmethod(time.monotonic)

    def __init__(self, facts: LiveFacts) -> None:
        self._facts = facts
        self._resources: dict[int, dict[str, Any]] = {}  # by the number the relay gave each

    def handle(self, message: tuple[Any, ...]) -> None:
        kind, facts = message[0], self._facts
        if kind == STARTED:
            facts.started(message[1], message[2], message[3])
        elif kind == ENDED:
            facts.ended(self._with_resource(message[1]))
        elif kind == WHOLE:
            facts.whole(self._with_resource(message[1]))
        elif kind == PROGRESS:
            facts.progress(*message[1:])
        elif kind == LOG:
            facts.log(message[1])
        elif kind == REPLAYED:
            facts.resumed(message[1])
        elif kind == RESOURCE:
            self._resources[message[1]] = message[2]

    def _with_resource(self, fields: tuple[Any, ...]) -> tuple[Any, ...]:
        """An end's fields with its resource's attributes for the number the relay gave it."""
        return (*fields[:11], self._resources.get(fields[11], {}))

    def next_poll(self) -> float | None:
        return None  # running steps are polled by the relay's watch

    def poll_due(self, now: float) -> None:
        pass

    def poll_all(self) -> None:
        pass


def _snapshot(stats: Stats, writer: Writer, handler: FactsHandler) -> dict[str, Any]:
    data = snapshot(stats, writer, handler)
    data["backlogged"] = int(writer.backlogged())  # the relay sheds progress meanwhile
    return data


def _room_for(writer: Writer, limit: int, parent: int) -> bool:
    """Wait while the writer's queue is full, so the job's queue drops as the writer thread's
    would; False if the job's process has gone meanwhile."""
    while writer.queue_length() >= limit - 1:  # room for a flush's request too
        if os.getppid() != parent:
            return False
        time.sleep(_FULL_QUEUE_PAUSE_S)
    return True


def main(argv: list[str]) -> int:
    parent = os.getppid()
    in_fd, out_fd = int(argv[0]), int(argv[1])
    # A stop sent to the job's process group (Ctrl-C, systemd, a container) is the job's to
    # handle; this process ends when its input closes, once it has written what it holds.
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_IGN)
    frames = read_frames(in_fd)
    first = next(frames, None)
    if first is None:
        return 0
    settings = Settings.from_payload(json.loads(first[0]))
    stats = Stats()
    handler = build_handler(settings, stats, source=_Received)
    replies = _Replies(out_fd)
    writer = build_writer(
        settings,
        handler,
        build_store(settings),
        stats,
        kind_of=lambda message: _KINDS.get(message[0], "message"),
        on_committed=replies.committed,
    )
    logger.addHandler(_ToTheJob(replies))
    logger.propagate = False  # the job's logging configuration decides where it goes
    flushes = _Flushes(writer, replies, snapshot=lambda: _snapshot(stats, writer, handler))
    threading.Thread(target=flushes.run, daemon=True).start()
    threading.Thread(target=replies.report, args=(flushes.snapshot,), daemon=True).start()
    try:
        _take(frames, writer, flushes, limit=settings.max_queue_size, parent=parent)
    finally:
        writer.shutdown(settings.shutdown_timeout_ms / 1000.0)
        # The last counters (what shutdown dropped among them) before the relay sees us exit.
        replies.send(lambda: (STATS, flushes.snapshot()))
    return 0


def _take(
    frames: Iterator[list[Any]], writer: Writer, flushes: _Flushes, *, limit: int, parent: int
) -> None:
    """The relay's messages into the writer's queue, until the input closes or the job is gone."""
    for frame in frames:
        for message in frame:
            if message[0] == FLUSH:
                flushes.request(message[1])  # answered by its thread: reading goes on
                continue
            if not _room_for(writer, limit, parent):
                return  # the job's process is gone: write what is held, then exit
            writer.submit(message)


class _Flushes:
    """One thread answers flushes: each wait covers every request made before it began, and
    its answer acknowledges all of them (a database outage holds one thread, not one each)."""

    def __init__(
        self, writer: Writer, replies: _Replies, *, snapshot: Callable[[], dict[str, Any]]
    ) -> None:
        self._writer, self._replies, self.snapshot = writer, replies, snapshot
        self._newest = 0
        self._requested = threading.Condition()

    def request(self, number: int) -> None:
        with self._requested:
            self._newest = max(self._newest, number)  # two flushes may arrive out of order
            self._requested.notify()

    def _answer(self, number: int, ok: bool) -> tuple[Any, ...]:
        return (FLUSHED, number, ok, self.snapshot())

    def run(self) -> None:
        answered = 0
        while True:
            with self._requested:
                while self._newest == answered:
                    self._requested.wait()
                number = self._newest
            ok = self._writer.flush(_FLUSH_WAIT_S)
            self._replies.send(partial(self._answer, number, ok))
            answered = number


class _Replies:
    """Frames back to the relay, whole (one writer at a time); once it is gone, nothing more
    is sent (its input ends soon). The counters go back every ``_STATS_EVERY_S`` they changed."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd
        self._lock = threading.RLock()  # a warning logged while a reply is built goes first

    def send(self, reply: Callable[[], tuple[Any, ...] | None]) -> bool:
        """Send what ``reply`` builds, built under the lock (counters never arrive out of
        order); None sends nothing. False once the relay is gone."""
        with self._lock:
            message = reply()
            if self._fd is None:
                return False
            if message is None:
                return True
            try:
                write_frame(self._fd, [message])
            except OSError:
                self._fd = None
                return False
            return True

    def committed(self, committed: Committed) -> None:
        """What a batch closed and finished: the job's process records the metrics."""
        steps, attempts = committed.closed_steps(), committed.finished_attempts()
        if steps or attempts:
            message = (METRICS, list(map(tuple, steps)), list(map(tuple, attempts)))
            self.send(lambda: message)

    def report(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        sent: dict[str, Any] = {}

        def changed() -> tuple[Any, ...] | None:
            nonlocal sent
            current = snapshot()
            if current == sent:
                return None
            sent = current
            return (STATS, current)

        while self._fd is not None:
            time.sleep(_STATS_EVERY_S)  # a period, not a wait for something
            self.send(changed)


class _ToTheJob(logging.Handler):
    """This process's warnings, sent to the relay to be logged in the job's process (its
    logging configuration, not this process's stderr); to stderr once the relay is gone."""

    def __init__(self, replies: _Replies) -> None:
        super().__init__(logging.WARNING)
        self._replies = replies

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if not self._replies.send(lambda: (WARNING, record.levelno, text)) and logging.lastResort:
            logging.lastResort.handle(record)
