"""The background queue engine both writers run on: FIFO flushes, drops, shutdown, fork reset."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from otel_jobsteps import JobStepsProcessor
from otel_jobsteps._live.background import BackgroundQueue, FlushRequest
from otel_jobsteps._telemetry.stats import Stats

UNUSED_DSN = "postgresql://nobody:secret@127.0.0.1:1/never"


class Worker:
    """Takes items in order; answers a flush at once; can hold its last round."""

    def __init__(self) -> None:
        self.engine: BackgroundQueue | None = None
        self.handled: list[Any] = []
        self.seen_at_flush: list[list[Any]] = []
        self.held = False
        self.release = threading.Event()
        self.release.set()
        self.resets = 0

    def holding_back(self) -> bool:
        return False

    def next_due(self) -> float | None:
        return None

    def work(self) -> None:
        assert self.engine is not None
        self.engine.drain(100, self.handled.append, self._flushed)

    def _flushed(self, request: FlushRequest) -> None:
        self.seen_at_flush.append(list(self.handled))
        request.ok = True
        request.done.set()

    def finish(self) -> None:
        self.release.wait()
        self.work()

    def holds_unwritten(self) -> bool:
        return self.held

    def flush_queued(self) -> None:
        return None

    def flush_abandoned(self, request: FlushRequest) -> None:
        return None

    def never_ran(self) -> None:
        return None

    def reset_after_fork(self) -> None:
        self.resets += 1


def _engine(max_queue_size: int = 10) -> tuple[BackgroundQueue, Worker, Stats]:
    worker, stats = Worker(), Stats()
    engine = BackgroundQueue(
        worker,
        stats,
        name="test-background",
        max_queue_size=max_queue_size,
        linger_s=0.001,
        wake_threshold=5,
    )
    worker.engine = engine
    return engine, worker, stats


def test_a_flush_covers_exactly_what_was_queued_before_it() -> None:
    engine, worker, _ = _engine()
    engine.submit("a")
    engine.submit("b")
    assert engine.flush(5.0)
    engine.submit("c")
    assert engine.flush(5.0)
    assert worker.seen_at_flush == [["a", "b"], ["a", "b", "c"]]
    assert engine.shutdown(5.0) is True


def test_a_flush_with_no_thread_running_is_true_only_when_nothing_is_queued_or_held() -> None:
    engine, worker, _ = _engine()
    assert engine.flush(5.0)  # nothing ever submitted: no thread starts for a flush
    assert engine.thread is None
    worker.held = True
    assert not engine.flush(5.0)
    worker.held = False
    engine.queue.append("left behind")  # as if a thread had died before taking it
    assert not engine.flush(5.0)


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_both_writers_answer_a_flush_before_any_span_without_starting_anything(
    writer: str,
) -> None:
    before = set(threading.enumerate())
    processor = JobStepsProcessor(writer=writer, dsn=UNUSED_DSN)
    try:
        assert processor.force_flush(1000)
        assert set(threading.enumerate()) - before == set()
    finally:
        processor.shutdown()


def test_items_past_the_bound_or_after_shutdown_are_dropped_and_counted() -> None:
    engine, _, stats = _engine(max_queue_size=2)
    engine.queue.extend(["a", "b"])  # full, and no thread yet to take them
    engine.submit("c")
    assert stats.get("dropped_str") == 1
    engine.queue.clear()
    engine.shutdown(5.0)
    engine.submit("d")
    assert stats.get("dropped_str") == 2


def test_shutdown_is_bounded_and_says_whether_the_thread_ended() -> None:
    engine, worker, _ = _engine()
    engine.submit("a")
    assert engine.flush(5.0)
    worker.release.clear()  # its last round blocks
    assert engine.shutdown(0.01) is False
    assert engine.shutdown(0.01) is None  # a second call does nothing
    worker.release.set()
    thread = engine.thread
    assert thread is not None
    thread.join(5.0)
    assert not thread.is_alive()


def test_a_forked_child_gets_an_empty_queue_and_no_thread() -> None:
    engine, worker, _ = _engine()
    engine.submit("a")
    assert engine.shutdown(5.0)  # in a real fork the parent's thread does not exist
    engine.reset_after_fork()
    assert (engine.length(), engine.thread, engine.stopping, worker.resets) == (0, None, False, 1)
    engine.submit("b")  # starts the child's own thread
    assert engine.flush(5.0)
    assert worker.handled == ["a", "b"]
    engine.shutdown(5.0)
