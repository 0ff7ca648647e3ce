"""The writer process's main: facts from the relay's pipe -> interpretation -> the writer.

Started by `relay.Relay` (``python -c`` importing `main`, with the job's working directory off
the path) with the pipe's two descriptors as arguments; the first frame holds its settings
(JSON). It writes exactly as the writer thread does (same
recorder, batches, retries, heartbeats, bounds) and answers each flush once it is committed.
It ends when its input closes (the relay shut down, or the job's process is gone): it writes
what it holds within the shutdown timeout, then exits.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from ._interpretation import Interpretation, build_interpretation
from ._metrics import Committed
from ._relay import WriterSettings, decode_facts, decode_log, read_frames, write_frame
from ._stats import Stats, logger
from ._store import StepStore
from ._writer import Writer
from .schema import check_writable_tables, migrate

__all__ = ["main"]

_STATS_EVERY_S = 0.5
_FULL_QUEUE_PAUSE_S = 0.01
# Relay messages by the name the writer thread's counters give the same thing.
_KINDS = {
    "s": "SpanStarted",
    "r": "SpanStarted",
    "w": "SpanEnded",
    "e": "SpanEnded",
    "p": "ProgressReported",
    "L": "LogEmitted",
}
_FLUSH_WAIT_S = 3600.0  # the relay's caller decides how long it waits


class _ReceivedFacts:
    """The writer's handler here: relay messages -> the interpretation's facts."""

    def __init__(self, interpretation: Interpretation) -> None:
        self.interpretation = interpretation
        recorder = interpretation.recorder
        self.next_due = recorder.next_due
        self.fire_due = recorder.fire_due
        self.flush_timers = recorder.flush_timers
        self.take_batch = interpretation.take_batch
        self.pending_operations = interpretation.pending_operations
        self.open_steps = interpretation.open_steps

    def handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        reader = self.interpretation
        if kind == "L":
            reader.log(decode_log(message))
        elif kind == "p":
            reader.progress(*message[1:])
        elif kind == "s":
            reader.started(decode_facts(message))
        elif kind == "w":
            reader.whole(decode_facts(message))
        elif kind == "r":
            reader.resumed(decode_facts(message))
        else:
            reader.ended(decode_facts(message))


def _snapshot(stats: Stats, writer: Writer, interpretation: Interpretation) -> dict[str, Any]:
    data = stats.snapshot()
    data["queued"] = writer.queue_length()
    data["open_attempts"] = interpretation.recorder.open_attempts()
    data["open_spans"] = interpretation.translator.open_spans()
    data["backlogged"] = int(writer.backlogged())  # the relay sheds progress meanwhile
    return data


def _room_for(writer: Writer, limit: int, parent: int) -> bool:
    """Wait while the writer's queue is full: the pipe fills, the relay waits, and the job's
    queue drops what it cannot hold, as the writer thread's does. False if the job's process
    has gone meanwhile (this one was handed to another parent)."""
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
    settings = WriterSettings(**json.loads(first[0]))
    stats = Stats()
    interpretation = build_interpretation(
        stats,
        debounce_ms=settings.debounce_ms,
        max_open_spans=settings.max_open_spans,
        logs_min_severity=settings.logs_min_severity,
        logs_max_per_step=settings.logs_max_per_step,
    )

    def prepare(conn: Any) -> None:
        if settings.auto_migrate:
            migrate(conn, schema=settings.schema)
        else:
            check_writable_tables(conn, schema=settings.schema)

    store = StepStore(
        settings.dsn,
        schema=settings.schema,
        connect_timeout_s=settings.connect_timeout_s,
        statement_timeout_ms=settings.statement_timeout_ms,
        max_detail_bytes=settings.max_detail_bytes,
        on_connect=prepare,
    )
    replies = _Replies(out_fd)
    writer = Writer(
        _ReceivedFacts(interpretation),
        store,
        stats,
        kind_of=lambda message: _KINDS.get(message[0], "message"),
        max_queue_size=settings.max_queue_size,
        max_pending_operations=2 * settings.max_queue_size,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        on_committed=replies.committed,
    )
    interpretation.backlogged = writer.backlogged
    logger.addHandler(_ToTheJob(replies))
    logger.propagate = False  # the job's logging configuration decides where it goes
    flushes = _Flushes(writer, replies, snapshot=lambda: _snapshot(stats, writer, interpretation))
    threading.Thread(target=flushes.run, daemon=True).start()
    threading.Thread(target=replies.report, args=(flushes.snapshot,), daemon=True).start()
    try:
        for frame in frames:
            for message in frame:
                if message[0] == "f":
                    flushes.request(message[1])  # answered by its thread: reading goes on
                    continue
                if not _room_for(writer, settings.max_queue_size, parent):
                    return 0  # the job's process is gone: write what is held, then exit
                writer.submit(message)
    finally:
        writer.shutdown(settings.shutdown_timeout_ms / 1000.0)
        # The last counters (what shutdown dropped among them) before the relay sees us exit.
        replies.send(lambda: ("t", flushes.snapshot()))
    return 0


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
        return ("a", number, ok, self.snapshot())

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
            message = ("m", list(map(tuple, steps)), list(map(tuple, attempts)))
            self.send(lambda: message)

    def report(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        sent: dict[str, Any] = {}

        def changed() -> tuple[Any, ...] | None:
            nonlocal sent
            current = snapshot()
            if current == sent:
                return None
            sent = current
            return ("t", current)

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
        if not self._replies.send(lambda: ("l", record.levelno, text)) and logging.lastResort:
            logging.lastResort.handle(record)
