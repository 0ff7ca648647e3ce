"""The writer side, built in one place: the store, the handler and what the hooks write through.

The processor is handed what this builds (a writer thread, or the relay to a writer process);
the writer process builds its store and handler here too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

from .._pg.store import StepStore
from .._telemetry.metrics import Committed
from .._telemetry.stats import Stats
from ..schema import check_writable_tables, migrate
from .interpretation import FactsHandler, FactsSource, LiveFacts, build_interpretation
from .settings import Settings
from .watch import SpanReader, SpanWatch, progress_poll_s
from .writer import RowStore, Writer
from .writer_process import Relay

__all__ = [
    "ProcessSide",
    "ThreadSide",
    "WriterSide",
    "build_handler",
    "build_store",
    "build_writer",
    "build_writer_side",
    "snapshot",
]

Clock = Callable[[], float]


def build_store(settings: Settings) -> StepStore:
    """The store of ``settings``: each new connection migrated or its tables checked first."""

    def prepare(conn: Any) -> None:
        if settings.auto_migrate:
            migrate(conn, schema=settings.schema)
        else:
            check_writable_tables(conn, schema=settings.schema)

    return StepStore(
        settings.dsn,
        schema=settings.schema,
        connect_timeout_s=settings.connect_timeout_s,
        statement_timeout_ms=settings.statement_timeout_ms,
        max_detail_bytes=settings.max_detail_bytes,
        on_connect=prepare,
    )


def build_handler(
    settings: Settings,
    stats: Stats,
    *,
    clock: Clock = time.monotonic,
    source: Callable[[LiveFacts], FactsSource] | None = None,
) -> FactsHandler:
    """The writer's handler: items read as fields by ``source`` (default: the watch of live
    spans) -> the interpreter's facts -> the recorder."""
    facts, recorder = build_interpretation(
        stats,
        debounce_ms=settings.debounce_ms,
        max_open_spans=settings.max_open_spans,
        clock=clock,
        logs_min_severity=settings.logs_min_severity,
        logs_max_per_step=settings.logs_max_per_step,
        dialects=settings.dialects,
    )
    read = source(facts) if source is not None else watch(settings, stats, facts, clock=clock)
    return FactsHandler(read, facts, recorder)


def watch(settings: Settings, stats: Stats, reader: SpanReader, *, clock: Clock) -> SpanWatch:
    """The watch of live spans for ``reader`` (the writer's facts, or the relay's outbox)."""
    return SpanWatch(
        reader,
        poll_interval_s=progress_poll_s(settings.debounce_ms),
        clock=clock,
        problem=stats.problem,
        max_steps=settings.max_open_spans,
    )


def build_writer(
    settings: Settings,
    handler: FactsHandler,
    store: RowStore,
    stats: Stats,
    *,
    clock: Clock = time.monotonic,
    **options: Any,
) -> Writer:
    """The writer thread of ``handler``; progress is shed while it holds its bound of operations."""
    writer = Writer(
        handler,
        store,
        stats,
        max_queue_size=settings.max_queue_size,
        # Unwritten row operations held while the database is away: same memory order.
        max_pending_operations=2 * settings.max_queue_size,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        clock=clock,
        **options,
    )
    handler.shed_progress_when(writer.backlogged)
    return writer


def snapshot(stats: Stats, writer: Writer, handler: FactsHandler) -> dict[str, Any]:
    """The counters, with the writer's queue and the handler's open attempts and spans."""
    data = stats.snapshot()
    data["queued"] = writer.queue_length()
    data["open_attempts"] = handler.recorder.open_attempts()
    data["open_spans"] = handler.open_spans()
    return data


class WriterSide(Protocol):
    """What the processor's hooks write through: a queue, its flush and shutdown, counters."""

    counters: Stats

    def submit(self, item: Any) -> None: ...
    def queue_length(self) -> int: ...
    def flush(self, timeout_s: float) -> bool: ...
    def shutdown(self, timeout_s: float) -> None: ...
    def stats(self) -> dict[str, Any]: ...
    def after_fork_in_child(self) -> None: ...


class ThreadSide:
    """The writer thread: queue -> handler (facts, interpretation, recorder) -> store."""

    def __init__(
        self,
        settings: Settings,
        counters: Stats,
        *,
        store: RowStore,
        clock: Clock = time.monotonic,
        on_committed: Callable[[Committed], None] | None = None,
    ) -> None:
        self.counters, self._settings, self._clock = counters, settings, clock
        self.handler = build_handler(settings, counters, clock=clock)
        self.writer = build_writer(
            settings, self.handler, store, counters, clock=clock, on_committed=on_committed
        )
        self.submit = self.writer.submit
        self.queue_length = self.writer.queue_length
        self.flush = self.writer.flush
        self.shutdown = self.writer.shutdown

    def stats(self) -> dict[str, Any]:
        return snapshot(self.counters, self.writer, self.handler)

    def after_fork_in_child(self) -> None:
        """A fresh handler and writer runtime: the parent's open spans are not this child's."""
        self.handler = build_handler(self._settings, self.counters, clock=self._clock)
        self.handler.shed_progress_when(self.writer.backlogged)
        self.writer.after_fork_in_child(self.handler)


class ProcessSide:
    """The relay to a writer process, which builds its own handler and store (same settings)."""

    def __init__(
        self,
        settings: Settings,
        counters: Stats,
        *,
        clock: Clock = time.monotonic,
        on_committed: Callable[[Committed], None] = lambda committed: None,
    ) -> None:
        self.counters = counters
        self.relay = Relay(
            partial(watch, settings, counters, clock=clock),
            settings,
            counters,
            max_queue_size=settings.max_queue_size,
            on_committed=on_committed,
        )
        self.submit = self.relay.submit
        self.queue_length = self.relay.queue_length
        self.flush = self.relay.flush
        self.shutdown = self.relay.shutdown

    def after_fork_in_child(self) -> None:
        pass  # the relay's queue starts afresh by itself

    def stats(self) -> dict[str, Any]:
        """The relay's counters, plus the writer process's as of its latest reply."""
        data = self.counters.snapshot()
        data["queued"] = self.relay.queue_length()
        for name, value in self.relay.child_stats().items():
            if name == "last_error":
                data[name] = value or data[name]
            elif name != "backlogged":
                data[name] = data.get(name, 0) + value
        return data


def build_writer_side(
    settings: Settings,
    counters: Stats,
    *,
    store: RowStore | None = None,
    clock: Clock = time.monotonic,
    on_committed: Callable[[Committed], None] = lambda committed: None,
) -> WriterSide:
    """The writer of ``settings``: a thread writing to ``store`` (else the DSN's), or a process."""
    if settings.writer == "process":
        return ProcessSide(settings, counters, clock=clock, on_committed=on_committed)
    return ThreadSide(
        settings,
        counters,
        store=store or build_store(settings),
        clock=clock,
        on_committed=on_committed,
    )
