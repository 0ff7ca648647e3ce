"""The writer process: interpretation and writing outside the job's interpreter (opt-in).

With ``JobStepsProcessor(writer="process")`` the job's hooks queue spans exactly as with the
writer thread, and a relay thread reads them as facts (`watch`) and sends the facts, in
order, through a pipe to a child process (`otel_jobsteps._writer_process`) that
interprets and writes them as the writer thread would. The job's interpreter then spends per
span only the hooks and the facts' encoding; the translation, the recorder, the statements
and psycopg run on another core, with their own garbage collector.

Frames in both directions: a 4-byte big-endian length, then a `marshal`-encoded list of
messages. Relay -> writer: ``("s"|"w"|"e", fields)`` a span started, whole, ended (its
`SpanFacts` fields; of its events only those the translation reads);
``("p", span_id, attributes, time_ns)`` a running step's newest progress; ``("L", fields)``
a log record (its `LogFacts` fields); ``("f", n)`` flush number n;
``("r", fields)`` a span still open when a new writer process starts (replayed, as at its
start: the spans the dead one knew are told again, so their later ends close their rows).
Writer -> relay: ``("a", n, ok, stats)`` flush n done (committed if ok); ``("t", stats)``.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import struct
import subprocess
import sys
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._facts import LogFacts, SpanFacts, log_fields
from ._metrics import ClosedStep, Committed, FinishedAttempt
from ._stats import Stats, logger
from ._translate import body_text
from ._watch import SpanWatch, fields_facts, plain_dict
from .attributes import JOB_EVENT_TYPE

__all__ = [
    "Relay",
    "WriterSettings",
    "decode_facts",
    "decode_log",
    "read_frames",
    "write_frame",
]

_LENGTH = struct.Struct(">I")
_MARSHAL_VERSION = 4
_PLAIN = (str, bool, int, float)
_MAX_BATCH_ITEMS = 10_000
_RESTART_BACKOFF_S = (0.5, 30.0)
# What describes the current writer process; every other counter adds up across them.
_GAUGES = frozenset({"queued", "open_attempts", "open_spans", "backlogged"})


def _adds_up(name: str, value: object) -> bool:
    """A counter that carries over from a dead writer process to the next one's."""
    return name not in _GAUGES and isinstance(value, int)


@dataclass(frozen=True)
class WriterSettings:
    """What the writer process needs to write as the writer thread would (sent as JSON)."""

    dsn: str
    schema: str
    debounce_ms: float
    max_queue_size: int
    shutdown_timeout_ms: int
    connect_timeout_s: float
    statement_timeout_ms: int
    heartbeat_interval_s: float
    max_detail_bytes: int
    max_open_spans: int
    auto_migrate: bool
    logs_min_severity: int = 9  # translate.DEFAULT_LOGS_MIN_SEVERITY
    logs_max_per_step: int = 1000  # recorder.DEFAULT_LOGS_MAX_PER_STEP


# -- the wire --------------------------------------------------------------------------------


def write_frame(fd: int, messages: list[Any]) -> None:
    """One frame on ``fd``, whole (os.write may take part of it)."""
    payload = _dumps(messages)
    data = memoryview(_LENGTH.pack(len(payload)) + payload)
    while data:
        data = data[os.write(fd, data) :]


def read_frames(fd: int) -> Iterator[list[Any]]:
    """The frames arriving on ``fd`` until it closes."""
    buffer = bytearray()
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return
        buffer += chunk
        while len(buffer) >= _LENGTH.size:
            (length,) = _LENGTH.unpack_from(buffer)
            end = _LENGTH.size + length
            if len(buffer) < end:
                break
            frame = marshal.loads(bytes(buffer[_LENGTH.size : end]))
            del buffer[:end]
            yield frame


def _dumps(messages: list[Any]) -> bytes:
    try:
        return marshal.dumps(messages, _MARSHAL_VERSION)
    except ValueError:  # a value marshal cannot hold: only that message is made plain
        return marshal.dumps([_plain(message) for message in messages], _MARSHAL_VERSION)


def _plain(value: Any) -> Any:
    """The same data with every value marshal cannot hold turned into its text."""
    if value is None or type(value) in _PLAIN:
        return value
    if isinstance(value, tuple | list):
        return tuple(_plain(item) for item in value)
    if isinstance(value, Mapping):
        return {_text(key): _plain(item) for key, item in value.items()}
    return _text(value)


def _text(value: object) -> str:
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - a value's own __str__ may fail: it must not stop the rest
        return "<unprintable>"


def decode_facts(message: tuple[Any, ...]) -> SpanFacts:
    """The facts of an ``s``/``w``/``e`` message, as the relay read them."""
    return fields_facts(message[1])


def decode_log(message: tuple[Any, ...]) -> LogFacts:
    """The facts of an ``L`` message (a log record), as the relay read them."""
    return LogFacts(*message[1])


class _Outbox:
    """The watch's reader on the relay thread: span facts become messages for the next frame.

    It keeps the start facts of the spans started and not yet ended in a frame sent (at most
    ``max_open``, oldest out; not the spans, which a job may drop unended), to replay them to a
    writer process that replaces a dead one.
    """

    def __init__(self, max_open: int) -> None:
        self.messages: list[Any] = []
        self._open: OrderedDict[int, tuple[Any, ...]] = OrderedDict()
        self._max_open = max_open
        self._ending: list[int] = []  # ends among the messages: still open until sent

    def started(self, fields: tuple[Any, ...]) -> None:
        self.messages.append(("s", fields))
        if JOB_EVENT_TYPE not in fields[6]:  # its attributes; an event is whole at its start
            opened = self._open
            opened[fields[1]] = fields
            if len(opened) > self._max_open:
                opened.popitem(last=False)

    def whole(self, fields: tuple[Any, ...]) -> None:
        self.messages.append(("w", fields))

    def ended(self, fields: tuple[Any, ...]) -> None:
        self.messages.append(("e", fields))
        self._ending.append(fields[1])

    def take(self) -> list[Any]:
        """The messages of the next frame; the spans they end are no longer open."""
        messages, self.messages = self.messages, []
        for span_id in self._ending:
            self._open.pop(span_id, None)
        self._ending.clear()
        return messages

    def replay(self) -> None:
        """Tell a new writer process first what is still open, in start order."""
        self.messages[:0] = [("r", fields) for fields in self._open.values()]

    def log(self, record: Any) -> None:
        fields = log_fields(record)
        body, attributes = fields[6], fields[7]
        if type(body) is not str or type(attributes) is not dict:  # the usual record is both
            if not (body is None or type(body) in _PLAIN or type(body) is bytes):
                body = body_text(body)  # a structure travels as its text: the message it is
            fields = (*fields[:6], body, dict(attributes))
        self.messages.append(("L", fields))

    def progress(self, span_id: int, attributes: Mapping[str, Any], time_ns: int = 0) -> bool:
        self.messages.append(("p", span_id, plain_dict(attributes), time_ns))
        return True


# -- the relay (job's process) ---------------------------------------------------------------


class _FlushRequest:
    __slots__ = ("done", "number", "ok")

    def __init__(self, number: int) -> None:
        self.number = number
        self.ok = False
        self.done = threading.Event()


# The job's working directory leaves the path first (no module there shadows ours; `-P` is
# 3.11+), then the writer process runs.
_START = (
    "import sys; del sys.path[0]; from otel_jobsteps._writer_process import main; "
    "sys.exit(main(sys.argv[1:]))"
)


def _child_environment() -> dict[str, str]:
    """The job's environment, with the directory this package was imported from first on the
    path (the writer process runs the same copy as the job), and without what would make it
    trace itself: auto-instrumentation's sitecustomize on PYTHONPATH, an SDK it configures."""
    environment = dict(os.environ, OTEL_SDK_DISABLED="true")
    ours = str(Path(__file__).resolve().parents[1])
    path = [
        entry
        for entry in environment.get("PYTHONPATH", "").split(os.pathsep)
        if entry and "auto_instrumentation" not in entry
    ]
    environment["PYTHONPATH"] = os.pathsep.join([ours, *path])
    return environment


class _Child:
    """One writer process and the two pipe ends the relay keeps.

    Every descriptor it opens is in ``fds`` (the relay's) from the moment it exists, so a
    fork at any point closes them in the forked child.
    """

    def __init__(self, settings: WriterSettings, fds: set[int]) -> None:
        self.exited = False
        self.replies_read = threading.Event()  # its last counters are in the relay's
        self._fds = fds
        to_child, self.to_fd = self._pipe()
        self.from_fd, from_child = self._pipe()
        try:
            command = [sys.executable, "-c", _START, str(to_child), str(from_child)]
            self.process = subprocess.Popen(
                command,
                pass_fds=(to_child, from_child),
                stdin=subprocess.DEVNULL,
                env=_child_environment(),
            )
        except BaseException:
            for fd in (to_child, from_child, self.to_fd, self.from_fd):
                self._close(fd)
            raise
        self._close(to_child)
        self._close(from_child)
        try:
            # The settings travel through the pipe: a password must not show in ps.
            write_frame(self.to_fd, [json.dumps(settings.__dict__)])
        except BaseException:
            self.close_pipe()
            self.close_replies()
            self.process.kill()
            self.process.wait()
            raise

    def _pipe(self) -> tuple[int, int]:
        read, write = os.pipe()
        self._fds.update((read, write))
        return read, write

    def _close(self, fd: int) -> int:
        """Close ``fd`` once (a number closed twice may belong to someone else by then)."""
        if fd >= 0:
            self._fds.discard(fd)
            with contextlib.suppress(OSError):
                os.close(fd)
        return -1

    def close_pipe(self) -> None:
        """Closing the writer's input ends it: it writes what it holds and exits."""
        self.to_fd = self._close(self.to_fd)

    def close_replies(self) -> None:
        self.from_fd = self._close(self.from_fd)


class Relay:
    """Queue -> facts -> frames to the writer process, on one background thread.

    The same queue contract as `writer.Writer` (``submit`` on the hot path, ``flush``,
    ``shutdown``); a flush is True once the writer process has committed everything queued
    before it. While no writer process runs (starting, or restarting after one died: what it
    held is lost, counted as ``writer_process_exited``) the queue waits, within its bound.
    """

    def __init__(
        self,
        watch: Callable[[_Outbox], SpanWatch],
        settings: WriterSettings,
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
        self._max_queue = max_queue_size
        self._linger, self._wake_threshold = linger_s, wake_threshold
        self._clock = clock
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._outbox = _Outbox(self._settings.max_open_spans)
        self._watch = self._make_watch(self._outbox)
        self._watch.backlogged = lambda: bool(self._latest_stats.get("backlogged"))
        self._queue: deque[Any] = deque()
        self._wakeup = threading.Event()
        self._idle = False
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._child: _Child | None = None
        self._fds: set[int] = set()  # every pipe end open in this process
        self._stopping = False
        self._flushes: dict[int, _FlushRequest] = {}
        self._flush_numbers = iter(range(1, 1 << 62))
        self._failures = 0
        self._restart_at = 0.0
        self._flush_waiting = False
        self._started_one = False  # a writer process started before: the next one is told
        # The writer process's counters: its latest reply, plus the last of those that died.
        self._latest_stats: dict[str, Any] = {}
        self._dead_stats: Counter[str] = Counter()
        self._stats_lock = threading.Lock()  # a dead process's counters move over as one step

    # -- application threads ------------------------------------------------------------------

    def submit(self, command: Any) -> None:
        """Queue a span item (dropped only when the queue is full)."""
        queue = self._queue
        if len(queue) >= self._max_queue or self._stopping:
            reason = "shut down" if self._stopping else "queue full"
            self._stats.problem("dropped_" + type(command).__name__, reason)
            return
        queue.append(command)
        if self._idle or len(queue) == self._wake_threshold or self._thread is None:
            self._wake()

    def _wake(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None and not self._stopping:
                    thread = threading.Thread(
                        target=self._run, name="otel_jobsteps-relay", daemon=True
                    )
                    thread.start()
                    self._thread = thread
        self._wakeup.set()

    def flush(self, timeout_s: float) -> bool:
        """True once everything submitted before the call is committed; False on timeout."""
        if self._thread is None or not self._thread.is_alive():
            return not self._queue
        request = _FlushRequest(next(self._flush_numbers))
        self._queue.append(request)
        self._flush_waiting = True  # a flush is worth one start now, backoff or not
        self._wakeup.set()
        if request.done.wait(timeout_s):
            return request.ok
        self._flushes.pop(request.number, None)  # nobody waits for it any more
        return False

    def shutdown(self, timeout_s: float) -> None:
        """Send what is queued, close the pipe and wait up to ``timeout_s`` for the writer
        process to write it; one still busy then finishes on its own."""
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
            thread = self._thread
        self._wakeup.set()
        if thread is None:
            return
        deadline = time.monotonic() + timeout_s
        thread.join(timeout_s)
        child = self._child
        if child is not None:
            try:
                child.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._stats.problem("shutdown_timeout", f"writer process busy after {timeout_s}s")
            else:  # its final counters (what it dropped) are read before stats() is asked
                child.replies_read.wait(max(0.0, deadline - time.monotonic()))

    def queue_length(self) -> int:
        return len(self._queue)

    def child_stats(self) -> dict[str, Any]:
        """The writer processes' counters (never going back when one is replaced)."""
        with self._stats_lock:
            latest = self._latest_stats
            merged: dict[str, Any] = dict(self._dead_stats)
        for name, value in latest.items():
            if not _adds_up(name, value):
                merged[name] = value
            else:
                merged[name] = merged.get(name, 0) + value
        return merged

    def after_fork_in_child(self) -> None:
        """A forked child gets its own queue, thread and (later) writer process; the parent's
        pipe ends are closed here (untouched in the parent)."""
        for fd in list(self._fds):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._init_runtime()

    # -- the relay thread ---------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wait()
            stopping = self._stopping
            try:
                self._relay_queued(final=stopping)
            except Exception as error:  # noqa: BLE001 - a bug must not stop the relay
                self._stats.problem("internal_error", error)
                self._lost(self._outbox.take(), error)
            if stopping:
                break
        with contextlib.suppress(Exception):
            self._watch.poll_all()
            self._send()
        if self._child is not None:
            self._child.close_pipe()

    def _wait(self) -> None:
        queue = self._queue
        if self._stopping:
            return
        if self._child is None and self._clock() < self._restart_at and not self._flush_waiting:
            # No writer process to send to: the queue waits (bounded) until the next start.
            self._wakeup.wait(self._restart_at - self._clock())
            self._wakeup.clear()
            return
        if len(queue) >= self._wake_threshold:
            return
        poll = self._watch.next_poll()
        timeout = None if poll is None else max(0.0, poll - self._clock())
        if queue:
            self._wakeup.wait(self._linger if timeout is None else min(timeout, self._linger))
        else:
            self._idle = True
            if not queue:
                self._wakeup.wait(timeout)
            self._idle = False
        self._wakeup.clear()

    def _relay_queued(self, *, final: bool) -> None:
        if not final:
            flushing = self._flush_waiting
            if self._running_child() is None:
                # Kept queued: nothing is read into facts that could not be sent. A flush
                # that asked for a start which failed is answered now (not committed).
                if flushing:
                    self._answer_queued_flushes()
                return
        queue, handle = self._queue, self._watch.handle
        while True:
            count = min(len(queue), _MAX_BATCH_ITEMS)
            for _ in range(count):
                item = queue.popleft()
                try:
                    if type(item) is _FlushRequest:
                        self._watch.poll_all()
                        self._flushes[item.number] = item
                        self._outbox.messages.append(("f", item.number))
                    else:
                        handle(item)
                except Exception as error:  # noqa: BLE001 - one bad item must not stop the rest
                    self._stats.problem("internal_error", error)
            self._watch.poll_due(self._clock())
            self._send()
            if not (final and queue):
                return

    def _answer_queued_flushes(self) -> None:
        for item in [item for item in list(self._queue) if type(item) is _FlushRequest]:
            with contextlib.suppress(ValueError):
                self._queue.remove(item)
            item.done.set()

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

    def _running_child(self) -> _Child | None:
        """The writer process, started (again) if there is none and its backoff is over."""
        child = self._child
        if child is not None and not child.exited:
            return child
        if child is not None:
            self._retire(child)
        if self._clock() < self._restart_at and not (self._stopping or self._flush_waiting):
            return None  # shutting down or flushing, one start is tried regardless
        self._flush_waiting = False
        try:
            child = _Child(self._settings, self._fds)
        except Exception as error:  # noqa: BLE001 - whatever it was, try again later
            self._stats.problem("writer_process_failed", error)
            self._schedule_restart()
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
            self._schedule_restart()
            return None
        self._child = child
        if self._started_one:
            # The spans the dead one knew are still open here: their ends must find them.
            self._outbox.replay()
            self._watch.offer_progress_again()
        self._started_one = True
        return child

    def _retire(self, child: _Child) -> None:
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

    def _read_replies(self, child: _Child) -> None:
        flushes = self._flushes
        try:
            for frame in read_frames(child.from_fd):
                for reply in frame:
                    if reply[0] == "a":
                        # It committed what it was sent: a later death starts the backoff afresh.
                        self._failures = 0
                        _, number, ok, self._latest_stats = reply
                        for done in [n for n in list(flushes) if n <= number]:
                            request = flushes.pop(done, None)
                            if request is not None:
                                request.ok = ok
                                request.done.set()
                    elif reply[0] == "l":  # a warning of the writer process's
                        logger.log(reply[1], "%s (writer process %d)", reply[2], child.process.pid)
                    elif reply[0] == "m":
                        self._committed(reply[1], reply[2])
                    else:
                        self._latest_stats = reply[1]
        except Exception as error:  # noqa: BLE001 - a reply it cannot read: that process goes
            self._stats.problem("writer_process_failed", error)
            with contextlib.suppress(OSError):
                child.process.kill()
        finally:
            child.process.wait()
            child.close_replies()
            with self._stats_lock:
                self._dead_stats.update(
                    {
                        name: value
                        for name, value in self._latest_stats.items()
                        if _adds_up(name, value)
                    }
                )
                self._latest_stats = {}
            child.exited = True
            child.replies_read.set()
            if not self._stopping:
                # What it held is lost; the flushes waiting on it cannot say "committed".
                self._stats.problem(
                    "writer_process_exited", f"writer process exited ({child.process.returncode})"
                )
                for number in list(flushes):
                    request = flushes.pop(number, None)
                    if request is not None:
                        request.done.set()
                self._wakeup.set()

    def _schedule_restart(self) -> None:
        self._failures += 1
        first, most = _RESTART_BACKOFF_S
        self._restart_at = self._clock() + min(most, first * 2 ** (self._failures - 1))

    def _lost(self, messages: list[Any], error: object) -> None:
        self._stats.problem("dropped_facts", error)
        # A replay is not lost: the spans it tells stay open here, told to the next one.
        lost = [message for message in messages if message[0] not in ("f", "r")]
        self._stats.add("dropped_facts", max(0, len(lost) - 1))
        for message in messages:
            if message[0] == "f":
                request = self._flushes.pop(message[1], None)
                if request is not None:
                    request.done.set()
