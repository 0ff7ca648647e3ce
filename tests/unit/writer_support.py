"""A writer side a test holds: what the processor's hooks queue, kept until the test says."""

from __future__ import annotations

from typing import Any

from otel_jobsteps._core.batch import Batch
from otel_jobsteps._live.settings import Settings
from otel_jobsteps._live.writer_side import ThreadSide
from otel_jobsteps._telemetry.stats import Stats
from otel_jobsteps.testing import InMemoryStore


class HeldSide:
    """The writer thread of ``store``, with the hooks' items held in ``held`` while ``holding``
    (the writer never reads them: the worst case); ``queued`` stands in for its queue length."""

    def __init__(self, store: InMemoryStore | None = None, *, holding: bool = True) -> None:
        settings = Settings.from_environment(has_store=True)
        self.side = ThreadSide(settings, Stats(), store=store or InMemoryStore())
        self.counters = self.side.counters
        self.handler = self.side.handler
        self.held: list[Any] = []
        self.holding = holding
        self.queued: int | None = None

    def submit(self, item: Any) -> None:
        if self.holding:
            self.held.append(item)
        else:
            self.side.submit(item)

    def queue_length(self) -> int:
        return self.side.queue_length() if self.queued is None else self.queued

    def release(self) -> None:
        """The held items go to the writer thread, in order, and what comes next too."""
        self.holding = False
        for item in self.held:
            self.side.submit(item)

    def read_by_hand(self) -> Batch | None:
        """The held items read by the writer's handler on this thread, and the batch they make."""
        for item in self.held:
            self.handler.handle(item)
        return self.handler.take_batch()

    def flush(self, timeout_s: float) -> bool:
        return self.side.flush(timeout_s)

    def shutdown(self, timeout_s: float) -> None:
        self.side.shutdown(timeout_s)

    def stats(self) -> dict[str, Any]:
        return self.side.stats()

    def after_fork_in_child(self) -> None:
        self.side.after_fork_in_child()
