"""The background writer: one named daemon thread per processor.

Application threads append to the background queue (`_live.background`); its thread drains it in
order into the recorder, writes the resulting batch in one transaction, and keeps the batch for
a later try when the database is unreachable.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .._core.batch import Batch
from .._pg.store import rejects_row
from .._telemetry.log import logger
from .._telemetry.metrics import Committed
from .._telemetry.stats import Stats
from ..errors import describe
from .background import BackgroundQueue, FlushRequest

__all__ = ["ItemHandler", "RowStore", "Writer"]


class ItemHandler(Protocol):
    """What the writer needs from its handler: queue items in, the recorder's batch out."""

    def handle(self, item: Any) -> None: ...
    def take_batch(self) -> Batch | None: ...
    def next_due(self) -> float | None: ...
    def fire_due(self, now: float | None = None) -> None: ...
    def flush_timers(self) -> None: ...
    def pending_operations(self) -> int: ...
    def open_steps(self) -> list[tuple[str, str, int, str]]: ...


class RowStore(Protocol):
    """What the writer needs from a store: `store.StepStore`, or `testing.InMemoryStore`."""

    last_transaction: int | None
    last_changes: Committed | None  # what that transaction changed, should its COMMIT go unanswered

    def write(self, batch: Batch) -> Committed | None: ...
    def write_one_by_one(
        self, batch: Batch, on_rejected: Callable[[str, BaseException], None]
    ) -> Committed | None: ...
    def transaction_status(self, transaction: int) -> str | None: ...
    def refresh_heartbeats(self, open_steps: Sequence[tuple[str, str, int, str]]) -> None: ...
    def close(self) -> None: ...
    def forget_after_fork(self) -> None: ...


class Writer:
    """Ordered queue -> recorder -> batches -> store, on one background thread."""

    def __init__(
        self,
        handler: ItemHandler,
        store: RowStore,
        stats: Stats,
        *,
        max_queue_size: int,
        max_batch_items: int = 10_000,
        max_pending_operations: int = 200_000,
        backoff_initial_s: float = 0.1,
        backoff_max_s: float = 10.0,
        heartbeat_interval_s: float = 30.0,
        linger_s: float = 0.005,
        wake_threshold: int = 1000,
        clock: Any = time.monotonic,
        kind_of: Callable[[Any], str] = lambda command: type(command).__name__,
        on_committed: Callable[[Committed], None] | None = None,
    ) -> None:
        self._handler, self._store, self._stats, self._clock = handler, store, stats, clock
        self._on_committed = on_committed  # what a committed batch changed (the metrics)
        # Bounds: queue items per drain, row operations held while the database is away.
        self._max_batch_items, self._max_pending_operations = (
            max_batch_items,
            max_pending_operations,
        )
        self._backoff_initial, self._backoff_max = backoff_initial_s, backoff_max_s
        self._heartbeat_interval = heartbeat_interval_s
        self._queue = BackgroundQueue(
            self,
            stats,
            name="otel_jobsteps-writer",
            max_queue_size=max_queue_size,
            linger_s=linger_s,
            wake_threshold=wake_threshold,
            clock=clock,
            kind_of=kind_of,  # names a dropped command in the counters
        )
        self.submit = self._queue.submit  # the hot path: a bare deque append
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._unwritten: Batch | None = None
        # A batch whose commit outcome is unknown, with its transaction id.
        self._uncertain: tuple[int, Batch] | None = None
        self._uncertain_changes: Committed | None = None  # counted if it proves committed
        self._waiting_flushes: list[FlushRequest] = []
        self._failures = 0
        self._retry_at = 0.0
        self._next_heartbeat = self._clock() + self._heartbeat_interval

    # -- application threads ------------------------------------------------------------------

    def flush(self, timeout_s: float) -> bool:
        """True once everything submitted before the call is committed; False on timeout."""
        return self._queue.flush(timeout_s)

    def shutdown(self, timeout_s: float) -> None:
        """Write what can be written within ``timeout_s``, then stop; a thread still busy ends
        on its own (bounded by the store's reply timeout) and closes its connection itself."""
        if self._queue.shutdown(timeout_s) is False:
            self._stats.problem(
                "shutdown_timeout",
                f"writer still busy after {timeout_s}s with {self._queue.length()} commands"
                " queued: what it has not written is lost if the process exits now",
            )

    def queue_length(self) -> int:
        return self._queue.length()

    def backlogged(self) -> bool:
        """True while the operations held for a later write are at their bound (writer thread)."""
        return self._pending_operations() >= self._max_pending_operations

    def after_fork_in_child(self, handler: ItemHandler) -> None:
        """A forked child's writer reads through a fresh handler (the queue re-inits itself)."""
        self._handler = handler

    # -- the background queue's worker (engine callbacks) ---------------------------------------

    def never_ran(self) -> None:
        self._store.close()  # no writer thread ever used it

    def holds_unwritten(self) -> bool:
        return self._unwritten is not None or self._uncertain is not None

    def flush_queued(self) -> None:
        return None

    def flush_abandoned(self, request: FlushRequest) -> None:
        return None

    def reset_after_fork(self) -> None:
        """The parent's socket is left be; what the parent held is the parent's to write."""
        self._store.forget_after_fork()
        self._init_runtime()

    # -- the writer thread --------------------------------------------------------------------

    def work(self) -> None:
        self._absorb(respect_bound=True)
        now = self._clock()
        if now >= self._retry_at:
            self._write(final=False)
        if now >= self._next_heartbeat:
            self._next_heartbeat = now + self._heartbeat_interval
            self._refresh_heartbeats()

    def finish(self) -> None:
        """Shutting down: take in everything queued, then one write attempt without backoff."""
        try:
            while self._queue.queue:
                self._absorb(respect_bound=False)
            self._handler.flush_timers()
            self._write(final=True)
        finally:
            self._store.close()  # only this thread ever uses the connection

    def holding_back(self) -> bool:
        return self.backlogged()  # only a flush or shutdown cuts the wait short

    def next_due(self) -> float | None:
        candidates = (self._handler.next_due(), self._retry_after(), self._next_heartbeat)
        return min((d for d in candidates if d is not None), default=None)

    def _absorb(self, *, respect_bound: bool) -> None:
        try:
            if not respect_bound or self._pending_operations() < self._max_pending_operations:
                self._drain()
            self._handler.fire_due()
        except Exception as error:  # noqa: BLE001 - a bug must not kill the writer
            self._stats.problem("internal_error", error)

    def _retry_after(self) -> float | None:
        return self._retry_at if self._unwritten or self._uncertain else None

    def _pending_operations(self) -> int:
        held = [self._unwritten, self._uncertain[1] if self._uncertain else None]
        return sum(b.operation_count() for b in held if b) + self._handler.pending_operations()

    def _drain(self) -> None:
        count = self._queue.drain(self._max_batch_items, self._handler.handle, self._flushed)
        self._stats.add("commands", count)

    def _flushed(self, request: FlushRequest) -> None:
        self._handler.flush_timers()
        self._waiting_flushes.append(request)
        self._retry_at = 0.0  # a flush is worth one attempt now, backoff or not

    def _write(self, *, final: bool) -> None:
        batch = self._handler.take_batch()
        if batch is not None:
            if self._unwritten is None:
                self._unwritten = batch
            else:
                self._unwritten.segments.extend(batch.segments)
        try:
            if not self._settle_uncertain_commit():
                self._schedule_retry()  # its transaction is still running on the server
                return
            pending = self._unwritten
            if pending is None:
                self._release_flushes()
                return
            committed = self._write_batch(pending)
        except Exception as error:  # noqa: BLE001 - absorbed: counted, logged, retried
            self._store.close()
            self._stats.problem("write_failed", error)
            if final:
                dropped = self._pending_operations()
                self._stats.add("dropped_operations", dropped)
                self._unwritten = self._uncertain = None
                if dropped:  # said every time, not rate-limited: these rows are lost for good
                    logger.warning(
                        "otel_jobsteps shutdown dropped %d operations: the database did not take"
                        " them (%s)",
                        dropped,
                        describe(error),
                    )
                return
            self._schedule_retry()
            return
        self._written(pending)
        self._committed(committed)
        self._unwritten = None
        self._failures = 0
        self._retry_at = 0.0
        self._release_flushes()

    def _written(self, batch: Batch) -> None:
        self._stats.add("operations_written", batch.operation_count())
        self._stats.add("batches_written")

    def _committed(self, committed: Committed | None) -> None:
        if committed is None or self._on_committed is None:
            return
        try:
            self._on_committed(committed)
        except Exception as error:  # noqa: BLE001 - metrics must not stop the writer
            self._stats.problem("internal_error", error)

    def _schedule_retry(self) -> None:
        self._failures += 1
        delay = min(self._backoff_max, self._backoff_initial * 2 ** (self._failures - 1))
        self._retry_at = self._clock() + random.uniform(delay / 2, delay)
        self._stats.add("retries")

    def _settle_uncertain_commit(self) -> bool:
        """Ask the server what became of a batch whose COMMIT went unanswered (a blind retry
        would duplicate rows): committed, done; else written again first; running, False."""
        if self._uncertain is None:
            return True
        transaction, batch = self._uncertain
        status = self._store.transaction_status(transaction)
        if status == "in progress":
            return False
        self._uncertain = None
        changes, self._uncertain_changes = self._uncertain_changes, None
        if status == "committed":
            self._stats.add("commits_confirmed_after_error")
            self._written(batch)
            self._committed(changes)
            return True
        if self._unwritten is not None:
            batch.segments.extend(self._unwritten.segments)
        self._unwritten = batch
        return True

    def _write_batch(self, batch: Batch) -> Committed | None:
        try:
            try:
                return self._store.write(batch)
            except Exception as error:
                if not rejects_row(error):
                    raise  # a lock wait, a deadlock, a restart: the whole batch, later
                self._stats.problem("batch_rejected", error)
                return self._store.write_one_by_one(batch, self._rejected)
        except Exception:
            # Whichever transaction failed last may still have committed: ask before a retry.
            transaction = self._store.last_transaction
            if transaction is not None:
                self._uncertain = (transaction, batch)
                self._uncertain_changes = self._store.last_changes
                self._unwritten = None
            raise

    def _refresh_heartbeats(self) -> None:
        if self._unwritten is not None or self._uncertain is not None:
            return  # the database is behind or away: the retry comes first
        open_steps = self._handler.open_steps()
        if not open_steps:
            return
        try:
            self._store.refresh_heartbeats(open_steps)
        except Exception as error:  # noqa: BLE001 - absorbed like every write
            self._stats.problem("heartbeat_failed", error)
        else:
            self._stats.add("heartbeats")

    def _rejected(self, statement: str, error: BaseException) -> None:
        self._stats.problem("rejected_" + statement, error)

    def _release_flushes(self) -> None:
        waiting, self._waiting_flushes = self._waiting_flushes, []
        for request in waiting:
            request.ok = True
            request.done.set()
