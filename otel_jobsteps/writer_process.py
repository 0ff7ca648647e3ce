"""The writer process's main: facts from the relay's pipe -> interpretation -> the writer.

Started by `relay.Relay` as ``python -m otel_jobsteps.writer_process IN_FD OUT_FD``; the
first frame holds its settings (JSON). It writes exactly as the writer thread does (same
recorder, batches, retries, heartbeats, bounds) and answers each flush once it is committed.
It ends when its input closes (the relay shut down, or the job's process is gone): it writes
what it holds within the shutdown timeout, then exits.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .processor import Interpretation, build_interpretation
from .relay import WriterSettings, decode_facts, read_frames, write_frame
from .schema import check_writable_tables, migrate
from .stats import Stats
from .store import StepStore
from .writer import Writer

__all__ = ["main"]

_STATS_EVERY_S = 0.5
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
        if kind == "p":
            reader.progress(message[1], message[2])
        elif kind == "s":
            reader.started(decode_facts(message))
        elif kind == "w":
            reader.whole(decode_facts(message))
        else:
            reader.ended(decode_facts(message))


def _snapshot(stats: Stats, writer: Writer, interpretation: Interpretation) -> dict[str, Any]:
    data = stats.snapshot()
    data["queued"] = writer.queue_length()
    data["open_attempts"] = interpretation.recorder.open_attempts()
    data["open_spans"] = interpretation.translator.open_spans()
    return data


def main(argv: list[str]) -> int:
    in_fd, out_fd = int(argv[0]), int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the job; the relay stops this
    frames = read_frames(in_fd)
    first = next(frames, None)
    if first is None:
        return 0
    settings = WriterSettings(**json.loads(first[0]))
    stats = Stats()
    interpretation = build_interpretation(
        stats, debounce_ms=settings.debounce_ms, max_open_spans=settings.max_open_spans
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
    writer = Writer(
        _ReceivedFacts(interpretation),
        store,
        stats,
        max_queue_size=settings.max_queue_size,
        max_pending_operations=2 * settings.max_queue_size,
        heartbeat_interval_s=settings.heartbeat_interval_s,
    )
    interpretation.backlogged = writer.backlogged
    replies = _Replies(out_fd)

    def snapshot() -> dict[str, Any]:
        return _snapshot(stats, writer, interpretation)

    def answer_flush(number: int) -> None:
        ok = writer.flush(_FLUSH_WAIT_S)
        replies.send(("a", number, ok, snapshot()))

    reporter = threading.Thread(target=replies.report, args=(snapshot,), daemon=True)
    reporter.start()
    try:
        for frame in frames:
            for message in frame:
                if message[0] == "f":
                    # Waited for on a thread of its own: the pipe keeps being read meanwhile.
                    threading.Thread(target=answer_flush, args=(message[1],), daemon=True).start()
                else:
                    writer.submit(message)
    finally:
        writer.shutdown(settings.shutdown_timeout_ms / 1000.0)
    return 0


class _Replies:
    """Frames back to the relay, whole (one writer at a time); once it is gone, nothing more
    is sent (its input ends soon). The counters go back every ``_STATS_EVERY_S`` they changed."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd
        self._lock = threading.Lock()

    def send(self, reply: tuple[Any, ...]) -> None:
        with self._lock:
            if self._fd is None:
                return
            try:
                write_frame(self._fd, [reply])
            except OSError:
                self._fd = None

    def report(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        sent: dict[str, Any] = {}
        while self._fd is not None:
            time.sleep(_STATS_EVERY_S)  # a period, not a wait for something
            current = snapshot()
            if current != sent:
                self.send(("t", current))
                sent = current


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
